"""Dump the AT-SPI accessibility tree as OSWorld's XML, or the focused terminal's text as JSON.

Runs under Debian's /usr/bin/python3 (python3-pyatspi is an apt package, not a wheel), as a child
process of the desktop server, so a hung application cannot hang the server: the server kills it
on timeout. Standard library plus pyatspi only.

Leaves out OSWorld's special-casing of LibreOffice Calc tables (visible-cell scan); the width cap
keeps such tables bounded instead.

    python3 atspi_dump.py tree       # XML on stdout
    python3 atspi_dump.py terminal   # {"output": "..."|null} on stdout
Exit code 3 means AT-SPI itself is unavailable (no pyatspi, no accessibility bus).
"""

import json
import sys
import xml.etree.ElementTree as ET

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
MAX_DEPTH, MAX_WIDTH, MAX_CALLS = 50, 1024, 5000
TERMINAL_APP = "gnome-terminal-server"

for _prefix, _uri in NS.items():
    ET.register_namespace(_prefix, _uri)

try:
    import pyatspi
except Exception as exc:  # ImportError, or gi failing to load the typelib
    print(f"pyatspi cannot be imported: {exc}", file=sys.stderr)
    sys.exit(3)


def q(prefix, name):
    return "{" + NS[prefix] + "}" + name


def _states(node, attrs):
    for state in node.getState().get_states():
        name = pyatspi.StateType._enum_lookup[state].split("_", 1)[1].lower()
        if name:
            attrs[q("st", name)] = "true"


def _component(node, attrs):
    if attrs.get(q("st", "visible")) == "true" and attrs.get(q("st", "showing")) == "true":
        try:
            x, y, w, h = node.queryComponent().getExtents(pyatspi.XY_SCREEN)
        except NotImplementedError:
            return
        attrs[q("cp", "screencoord")] = str((x, y))
        attrs[q("cp", "size")] = str((w, h))


def _extras(node, attrs):
    """Image, selection, value and action interfaces, as OSWorld reports them."""
    for flag, query in (("image", node.queryImage), ("selection", node.querySelection)):
        try:
            query()
            attrs[flag] = "true"
        except NotImplementedError:
            pass
    try:
        value = node.queryValue()
        for key, getter in (
            ("value", "currentValue"),
            ("min", "minimumValue"),
            ("max", "maximumValue"),
            ("step", "minimumIncrement"),
        ):
            attrs[q("val", key)] = str(getattr(value, getter))
    except NotImplementedError:
        pass
    try:
        action = node.queryAction()
        for i in range(action.nActions):
            name = action.getName(i).replace(" ", "-")
            attrs[q("act", name + "_desc")] = action.getDescription(i)
            attrs[q("act", name + "_kb")] = action.getKeyBinding(i)
    except NotImplementedError:
        pass


def _text(node):
    try:
        text_obj = node.queryText()
        return (
            text_obj.getText(0, text_obj.characterCount).replace("\ufffc", "").replace("\ufffd", "")
        )
    except NotImplementedError:
        return ""


class Walker:
    def __init__(self):
        self.calls = 0

    def node(self, acc, depth):
        self.calls += 1
        attrs = {"name": acc.name or ""}
        _states(acc, attrs)
        for key, value in (acc.get_attributes() or {}).items():
            if key:
                attrs[q("attr", key)] = value
        _component(acc, attrs)
        _extras(acc, attrs)
        role = (acc.getRoleName().strip() or "unknown").replace(" ", "-")
        element = ET.Element(role, attrs)
        text = _text(acc)
        if text:
            element.text = text
        if depth < MAX_DEPTH:
            self.children(acc, element, depth)
        return element

    def children(self, acc, element, depth):
        try:
            for i, child in enumerate(acc):
                if i >= MAX_WIDTH or self.calls >= MAX_CALLS:
                    break
                if child is not None:
                    element.append(self.node(child, depth + 1))
        except Exception as exc:  # a dying app raises from the bus; keep the rest of the tree
            print(f"skipped children of {acc.name!r}: {exc}", file=sys.stderr)


def dump_tree():
    desktop = pyatspi.Registry.getDesktop(0)
    root = ET.Element("desktop-frame")
    walker = Walker()
    for app in desktop:
        if app is not None and walker.calls < MAX_CALLS:
            root.append(walker.node(app, 1))
    return root


def terminal_text(root):
    """OSWorld's rule: the focused terminal inside the active gnome-terminal frame."""
    for app in root.findall("application"):
        if app.get("name") != TERMINAL_APP:
            continue
        for frame in app.findall("frame"):
            if frame.get(q("st", "active")) != "true":
                continue
            focused = [t for t in frame.iter("terminal") if t.get(q("st", "focused")) == "true"]
            if len(focused) == 1:
                return (focused[0].text or "").rstrip()
    return None


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "tree"
    try:
        root = dump_tree()
    except Exception as exc:  # no accessibility bus reachable
        print(f"cannot reach the AT-SPI registry: {exc}", file=sys.stderr)
        sys.exit(3)
    if mode == "terminal":
        print(json.dumps({"output": terminal_text(root)}))
    else:
        sys.stdout.write(ET.tostring(root, encoding="unicode"))


if __name__ == "__main__":
    main()
