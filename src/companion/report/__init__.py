"""Publish: figures, the papermill stages and the offline book.

``figures`` (one function per chart) -> ``export_figures`` (SVG/PNG) -> ``stages`` (papermill runs and the
Jupyter Book build) -> ``book_assets`` (offline Vega and MathJax) -> ``book_check`` (headless Chromium).
"""
