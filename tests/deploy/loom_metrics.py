"""The metric families loomd exports, read from its sources (server/metrics/*.cc), for the tests
that check what the dashboard and the Prometheus rules query.

Only the `loom_` names count (the `vllm:` mirror of --metrics-compat=vllm is for existing vLLM
dashboards, not ours). Nothing outside the sources is accepted.
"""
import pathlib
import re

# Names accepted although server/metrics/ does not declare them (none).
AHEAD_OF_SOURCES = {}

_PREFIXED = re.compile(r'\b(gauge|counter|histogram)\(\s*"([a-z][a-z0-9_]*)"')
_BUILT = re.compile(r'Build(Gauge|Counter|Histogram)\(\)\s*\.Name\(\s*(prefix \+ )?"([a-z][a-z0-9_:]*)"\s*\)')


def exported_metrics(root):
    """{name: type} of every loom_ family defined in server/metrics/*.cc (type: gauge, counter,
    histogram). Fails when the sources yield nothing, so that a change of their shape is seen."""
    found = {}
    for path in sorted(pathlib.Path(root, "server", "metrics").glob("*.cc")):
        text = path.read_text()
        for kind, name in _PREFIXED.findall(text):
            found["loom_" + name] = kind
        for kind, prefixed, name in _BUILT.findall(text):
            full = "loom_" + name if prefixed else name
            if full.startswith("loom_"):
                found[full] = kind.lower()
    if len(found) < 10:
        raise AssertionError(f"only {len(found)} metric families found in server/metrics/: "
                             "has the way they are declared changed?")
    return found


def accepted_metrics(root):
    """exported_metrics plus AHEAD_OF_SOURCES."""
    names = exported_metrics(root)
    names.update(AHEAD_OF_SOURCES)
    return names


def series_names(families):
    """The series names a Prometheus query may use for these families: a histogram's _bucket,
    _sum and _count, the name itself for the others."""
    names = set()
    for name, kind in families.items():
        if kind == "histogram":
            names.update({name + "_bucket", name + "_sum", name + "_count"})
        else:
            names.add(name)
    return names


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_DURATION = re.compile(r"(?<![A-Za-z0-9_:])(\d+(ms|s|m|h|d|w|y))+(?![A-Za-z0-9_:])")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "offset", "bool", "inf", "nan", "atan2"}


def metric_names_in(expr):
    """The metric (or recorded series) names a PromQL expression selects: every identifier
    that is not a function, an aggregation, a keyword, a label name or a Grafana variable."""
    e = _VARIABLE.sub(" ", expr)
    e = _STRING.sub(" ", e)
    e = _MATCHERS.sub(" ", e)
    e = _RANGE.sub(" ", e)
    e = _GROUPING.sub(" ", e)
    e = _DURATION.sub(" ", e)
    e = _NUMBER.sub(" ", e)
    names = set()
    for m in _IDENT.finditer(e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if word.lower() in _KEYWORDS or rest.startswith("("):
            continue
        names.add(word)
    return names
