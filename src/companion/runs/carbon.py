"""Carbon from energy, offline, with CodeCarbon's bundled per-country electricity mix.

Applied at analysis time (``companion.energy.tables``, ``companion predict``), never by the runner: a
record keeps the energy and the run's ``country``, so a finished measurement cannot fail on a carbon
lookup, and a changed intensity table changes the CO2 without re-running anything.
"""

from __future__ import annotations

import json
from functools import lru_cache

from companion.errors import ConfigError
from companion.runs.optional import require

J_PER_KWH = 3.6e6


@lru_cache(maxsize=1)
def _energy_mix() -> tuple[dict, str]:
    codecarbon = require("codecarbon", "the carbon intensity of electricity (CO2 from energy)")
    from importlib import resources

    path = resources.files("codecarbon") / "data" / "private_infra" / "global_energy_mix.json"
    return json.loads(path.read_text()), f"codecarbon {codecarbon.__version__} global_energy_mix.json"


def carbon_intensity(country: str) -> dict:
    """gCO2e per kWh for an ISO alpha-3 country code, with where the figure comes from."""
    mix, source = _energy_mix()
    entry = mix.get(str(country).upper())
    if entry is None or entry.get("carbon_intensity") is None:
        raise ConfigError(
            f"country={country!r} has no carbon intensity in CodeCarbon's table; "
            "use an ISO 3166-1 alpha-3 code such as USA, FRA or DEU"
        )
    return {
        "country": entry["iso_code"],
        "country_name": entry["country_name"],
        "g_per_kwh": float(entry["carbon_intensity"]),
        "year": entry.get("year"),
        "source": source,
    }


def co2_kg(energy_j: float, country: str) -> float:
    """kg CO2e for ``energy_j`` joules drawn from the grid of ``country``."""
    return energy_j / J_PER_KWH * carbon_intensity(country)["g_per_kwh"] / 1000.0
