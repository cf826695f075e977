"""Session-wide test settings."""
from __future__ import annotations

import functools
import sys

import pytest


@pytest.fixture(autouse=True)
def _streamlit_components_scanned_once():
    """Every AppTest run scans the metadata of each installed distribution for Streamlit v2 components
    (about 0.5 s a run on the 2-core box, most of a dashboard test); the installed packages do not change
    during a test session, so each worker scans once. The dashboard itself still runs in full."""
    scanner = sys.modules.get("streamlit.components.v2.manifest_scanner")
    if scanner is not None and not hasattr(scanner.scan_component_manifests, "cache_info"):
        scanner.scan_component_manifests = functools.cache(scanner.scan_component_manifests)
    yield
