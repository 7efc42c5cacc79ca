"""The few git operations a commit bisect needs, none of which touches the user's work tree.

A probed commit is checked out in a temporary `git worktree add --detach` folder (its hooks off),
removed afterwards and pruned: no checkout, no stash, no change to HEAD, the index or any file of
the user's own work tree. Every failure is a `UsageError` that quotes git's own line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import UsageError

__all__ = ["Commit", "git", "repo_root", "common_dir", "resolve", "commit_range", "commit_info", "diffstat", "tracked",
           "worktree_at"]

_TIMEOUT = 120  # seconds for one git command (a worktree of a large repository takes a while)


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


def git(repo: str | Path, *args: str, check: bool = True) -> str:
    """Run `git -C repo ARGS` with hooks off; its stdout, or a `UsageError` with git's first error line."""
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT)
    except FileNotFoundError:
        raise UsageError("bisect over commits needs git, and no `git` is on the PATH") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"`git {' '.join(args)}` took more than {_TIMEOUT} s in {repo}") from None
    if check and proc.returncode != 0:
        line = next((ln.strip() for ln in proc.stderr.splitlines() if ln.strip()), f"exit {proc.returncode}")
        raise UsageError(f"`git {' '.join(args)}` failed in {repo}: {line}")
    return proc.stdout


def repo_root(repo: str | Path) -> Path:
    """The top folder of the git work tree holding `repo`, or a usage error saying it is not one."""
    path = Path(repo)
    if not os.path.exists(path):
        raise UsageError(f"--repo {str(repo)!r}: no such file or folder; give the git repository (e.g. --repo .)")
    if not path.is_dir():
        raise UsageError(f"--repo {str(repo)!r} is a file, not a folder; give the git repository (e.g. --repo .)")
    try:
        return Path(git(path, "rev-parse", "--show-toplevel").strip()).resolve()
    except UsageError:
        raise UsageError(f"--repo {str(repo)!r} is not inside a git work tree; give the git repository "
                         "(e.g. --repo .)") from None


def common_dir(root: Path) -> Path:
    """The repository's shared git folder (the same for every worktree of it)."""
    out = Path(git(root, "rev-parse", "--git-common-dir").strip())
    return (out if out.is_absolute() else root / out).resolve()


def resolve(root: Path, rev: str, option: str) -> str:
    """The full sha of commit `rev`, or a usage error naming the option and the revision."""
    if not rev or rev.startswith("-"):
        raise UsageError(f"{option} {rev!r} is not a revision; give a commit (sha, tag, branch, HEAD~3)")
    out = git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False).strip()
    if not out:
        raise UsageError(f"{option} {rev!r} is not a commit of {root}; `git log --oneline` lists them")
    return out


def commit_range(root: Path, good: str, bad: str) -> list[str]:
    """GOOD, then the first-parent commits on the ancestry path from GOOD to BAD, oldest first (BAD last)."""
    if good == bad:
        raise UsageError(f"--good and --bad are the same commit ({good[:10]}); nothing lies between them")
    if subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", good, bad],
                      capture_output=True, timeout=_TIMEOUT).returncode != 0:
        raise UsageError(f"--good {good[:10]} is not an ancestor of --bad {bad[:10]}: the good commit must come "
                         "first (swap them?)")
    between = git(root, "rev-list", "--reverse", "--ancestry-path", "--first-parent", f"{good}..{bad}").split()
    if not between or between[-1] != bad:
        raise UsageError(f"--bad {bad[:10]} is not on the first-parent line from --good {good[:10]}; "
                         "give a --good on its first-parent history")
    return [good, *between]


def commit_info(root: Path, sha: str) -> Commit:
    return Commit(sha, git(root, "show", "-s", "--format=%s", sha).strip())


def diffstat(root: Path, sha: str) -> str:
    """`git show --stat --format= SHA`: the files a commit changed, with their line counts; a merge is
    shown against its first parent (the line the bisect walks), not as git's usually empty combined stat."""
    out = git(root, "show", "--stat", "--format=", "--diff-merges=first-parent", sha, check=False)
    return (out if out.strip() else git(root, "show", "--stat", "--format=", sha, check=False)).strip("\n")


def tracked(root: Path, sha: str, path: str) -> bool:
    """Whether `path` (a file or folder) exists in the tree of commit `sha`."""
    return bool(git(root, "ls-tree", "--name-only", sha, "--", path.rstrip("/"), check=False).strip())


@contextlib.contextmanager
def worktree_at(root: Path, sha: str) -> Iterator[Path]:
    """A detached worktree of commit `sha` in a temporary folder, removed (and pruned) on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="signalchain-bisect-"))
    path = tmp / sha[:12]
    try:
        git(root, "worktree", "add", "--detach", "--force", str(path), sha)
        yield path
    finally:
        git(root, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git(root, "worktree", "prune", check=False)
