"""Altair charts that work in the offline report and in JupyterLab.

The `claimrace` renderer returns two representations of each chart:

- EMBED_MIMETYPE: a <div> and a plain `vegaEmbed(...)` call. The report's
  nbconvert template prefers it, and inlines the vega-embed bundle (vega,
  vega-lite, vega-embed, vega-tooltip; shipped by vl-convert-python) once in
  the page head, so the article needs no CDN.
- text/html: altair's own output, for JupyterLab (it loads vega from a CDN).

JupyterLab does not know EMBED_MIMETYPE and ignores it.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json

import altair as alt

EMBED_MIMETYPE = "text/vnd.claimrace.vega-embed+html"
RENDERER_NAME = "claimrace"
CHART_CLASS = "claimrace-chart"
# svg: crisp text, and a DOM a test can inspect; no action menu (it links to an online editor)
EMBED_OPTIONS = {"renderer": "svg", "actions": False}

_counter = itertools.count()


def _vegalite_version() -> str:
    """'6.4' for altair's schema v6.4.1: the bundle must compile the same Vega-Lite."""
    return ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


def javascript_bundle() -> str:
    """vega + vega-lite + vega-embed as one classic script that defines window.vegaEmbed.

    Wrapped in a function so its top-level names cannot collide with the page's.
    """
    import vl_convert

    version = _vegalite_version()
    kwargs = {"vl_version": version} if version in vl_convert.get_vegalite_versions() else {}
    bundle = vl_convert.javascript_bundle(**kwargs)
    return "(function () {\n" + bundle + "\n})();"


def _script_safe_json(value) -> str:
    # "</script>" inside a string would end the script element early
    return json.dumps(value, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")


def embed_html(spec: dict, div_id: str | None = None) -> str:
    """A div and the vegaEmbed call that draws `spec` into it (needs the bundle on the page)."""
    if div_id is None:
        digest = hashlib.sha1(_script_safe_json(spec).encode()).hexdigest()[:10]
        div_id = f"chart-{digest}-{next(_counter)}"
    return (
        f'<div class="{CHART_CLASS}" id="{div_id}"></div>\n'
        "<script>\n"
        f'vegaEmbed("#{div_id}", {_script_safe_json(spec)}, {_script_safe_json(EMBED_OPTIONS)})'
        '.catch(function (error) { console.error("chart ' + div_id + ':", error); });\n'
        "</script>"
    )


def _altair_html_renderer():
    major = alt.SCHEMA_VERSION.split(".")[0]  # "v6"
    return importlib.import_module(f"altair.vegalite.{major}.display").html_renderer


def render(spec: dict, **metadata) -> dict:
    """The renderer altair calls to display a chart."""
    bundle = _altair_html_renderer()(spec, **metadata)
    if isinstance(bundle, tuple):  # some renderers return (data, metadata)
        bundle = bundle[0]
    return {**bundle, EMBED_MIMETYPE: embed_html(spec)}


def enable() -> None:
    """Use the claimrace renderer for every chart this kernel displays."""
    if RENDERER_NAME not in alt.renderers.names():
        alt.renderers.register(RENDERER_NAME, render)
    alt.renderers.enable(RENDERER_NAME)
