"""Write kubecua's Grafana dashboards as JSON into the chart, or check the shipped copies.

    python -m kubecua_dashboards [--out DIR]           # regenerate (make dashboards)
    python -m kubecua_dashboards --check [--out DIR]   # exit 1 and name the files that differ

DIR defaults to charts/kubecua/dashboards. The JSON is never edited by hand: edit the builders in
this package and regenerate. Leaves out: provisioning into a running Grafana (the chart's
ConfigMaps and Grafana's sidecar do that).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from kubecua_dashboards import fleet, operator, training

DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "kubecua-training.json": training.build,
    "kubecua-fleet.json": fleet.build,
    "kubecua-operator.json": operator.build,
}
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "kubecua" / "dashboards"


def render() -> dict[str, str]:
    """File name -> JSON text, stable (sorted keys) so a diff means a real change."""
    out = {}
    for name, build in DASHBOARDS.items():
        model = build().build()
        for i, panel in enumerate(model.panels or [], start=1):
            panel.id_val = i  # Grafana links and edits panels by id; the builders leave it unset
        board = json.loads(json.dumps(model, cls=JSONEncoder))
        for variable in board.get("templating", {}).get("list", []):
            if variable.get("type") != "interval":
                # The SDK writes an interval variable's settings on every variable; Grafana's own
                # dashboard types (@grafana/schema, checked by `make lint-dashboards`) reject them.
                for key in ("auto", "auto_count", "auto_min"):
                    variable.pop(key, None)
        out[name] = json.dumps(board, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubecua_dashboards")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    rendered = render()
    if args.check:
        stale = [n for n, text in rendered.items() if _read(args.out / n) != text]
        extra = sorted(p.name for p in args.out.glob("*.json") if p.name not in rendered)
        for name in stale + extra:
            print(f"{args.out / name} differs from the generator: run `make dashboards`",
                  file=sys.stderr)  # fmt: skip
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        (args.out / name).write_text(text)
    print(f"wrote {len(rendered)} dashboards to {args.out}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    raise SystemExit(main())
