"""LoRA adapters with `peft`, the way fine-tuning scripts add them: adapters injected into the
named linear layers, every base weight frozen, only the adapters trained."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["add_lora", "freeze"]


def add_lora(module: torch.nn.Module, target_modules: Any, r: int = 8, alpha: int = 16) -> torch.nn.Module:
    """Inject LoRA adapters (rank `r`) into `module`'s layers matching `target_modules` (a list of
    names or a regex), in place; then freeze everything of `module` but the adapters."""
    from peft import LoraConfig, inject_adapter_in_model

    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=target_modules, bias="none")
    inject_adapter_in_model(cfg, module)
    for name, p in module.named_parameters():
        p.requires_grad_("lora_" in name)
    return module


def freeze(module: torch.nn.Module) -> torch.nn.Module:
    for p in module.parameters():
        p.requires_grad_(False)
    return module
