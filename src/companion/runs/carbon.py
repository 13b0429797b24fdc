"""Carbon from energy, offline, with CodeCarbon's bundled per-country electricity mix."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from companion.errors import ConfigError

J_PER_KWH = 3.6e6


@lru_cache(maxsize=1)
def _energy_mix() -> dict:
    path = resources.files("codecarbon") / "data" / "private_infra" / "global_energy_mix.json"
    return json.loads(path.read_text())


def carbon_intensity(country: str) -> dict:
    """gCO2e per kWh for an ISO alpha-3 country code, with where the figure comes from."""
    mix = _energy_mix()
    entry = mix.get(country.upper())
    if entry is None or entry.get("carbon_intensity") is None:
        raise ConfigError(
            f"country={country!r} has no carbon intensity in CodeCarbon's table; "
            "use an ISO 3166-1 alpha-3 code such as USA, FRA or DEU"
        )
    import codecarbon

    return {
        "country": entry["iso_code"],
        "country_name": entry["country_name"],
        "g_per_kwh": float(entry["carbon_intensity"]),
        "year": entry.get("year"),
        "source": f"codecarbon {codecarbon.__version__} global_energy_mix.json",
    }


def co2_kg(energy_j: float, country: str) -> float:
    return energy_j / J_PER_KWH * carbon_intensity(country)["g_per_kwh"] / 1000.0
