"""The doctor's families. Each module here declares its families (`register(Family(name, title,
steps=(Step(...), ...), after=(...), knobs=...))`); importing this package imports every module in it,
so adding a family is adding a file."""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")
