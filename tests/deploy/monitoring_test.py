#!/usr/bin/env python3
"""The monitoring files of deploy/, checked as Prometheus and Grafana will read them:

  - deploy/prometheus/prometheus.yml passes `promtool check config`, the rule files pass
    `promtool check rules`, and tests/deploy/prometheus_rules_test.yml passes `promtool test
    rules` (every alert fires on bad data and stays silent on good data);
  - deploy/grafana/loom-dashboard.json is valid JSON of a Grafana dashboard (unique panel ids,
    every panel on the Prometheus data source variable, every target an expression);
  - every metric the dashboard, its variables and the rules query is one loomd exports (the
    loom_ families of server/metrics/*.cc, read by tests/deploy/loom_metrics.py), a histogram series
    of one, a series recorded by the rules, or Prometheus's `up`.

  python3 tests/deploy/monitoring_test.py
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import unittest

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import loom_metrics  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "loom-dashboard.json"
RULE_FILES = [PROM / "recording_rules.yml", PROM / "alert_rules.yml"]


def promtool(*args):
    tool = shutil.which("promtool")
    if tool is None:
        raise AssertionError("promtool not found: deploy/install-deps.sh installs it (package prometheus)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)


def rules():
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(group["rules"])
    return out


def dashboard_panels(dash):
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


class PromtoolTest(unittest.TestCase):
    def test_config_is_valid(self):
        r = promtool("check", "config", str(PROM / "prometheus.yml"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2 rule files found", r.stdout)

    def test_rules_are_valid(self):
        r = promtool("check", "rules", *map(str, RULE_FILES))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_rule_unit_tests_pass(self):
        r = promtool("test", "rules", str(ROOT / "tests" / "deploy" / "prometheus_rules_test.yml"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS", r.stdout)

    def test_every_alert_the_issue_asks_for_exists_and_is_unit_tested(self):
        alerts = {r["alert"] for r in rules() if "alert" in r}
        wanted = {"LoomQueueGrowing", "LoomKvCacheSaturated", "LoomTtftSloFastBurn",
                  "LoomTtftSloSlowBurn", "LoomInstanceNotReady", "LoomInstanceDown",
                  "LoomRequestsFailing", "LoomMigrationsFailing"}
        self.assertEqual(alerts, wanted)
        tests = yaml.safe_load((ROOT / "tests" / "deploy" / "prometheus_rules_test.yml").read_text())
        fired = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", [])
                 if t["exp_alerts"]}
        self.assertEqual(fired, wanted, "every alert needs a unit test in which it fires")


class MetricNamesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.families = loom_metrics.accepted_metrics(ROOT)
        cls.recorded = {r["record"] for r in rules() if "record" in r}
        cls.known = loom_metrics.series_names(cls.families) | cls.recorded | {"up"}

    def assert_known(self, expr, where):
        names = loom_metrics.metric_names_in(expr)
        self.assertTrue(names, f"{where}: no metric found in {expr!r}")
        unknown = names - self.known
        self.assertFalse(unknown, f"{where}: {sorted(unknown)} is not a metric loomd exports ({expr!r})")

    def test_parser_finds_the_families_loomd_declares(self):
        exported = loom_metrics.exported_metrics(ROOT)
        for name, kind in {"loom_num_requests_waiting": "gauge",
                           "loom_kv_cache_usage_perc": "gauge",
                           "loom_kv_cache_capacity_tokens": "gauge",
                           "loom_request_success_total": "counter",
                           "loom_request_rejected_total": "counter",
                           "loom_time_to_first_token_seconds": "histogram",
                           "loom_migrations_total": "counter",
                           "loom_migration_downtime_seconds": "histogram"}.items():
            self.assertEqual(exported.get(name), kind, name)

    def test_name_extraction(self):
        self.assertEqual(loom_metrics.metric_names_in(
            'histogram_quantile(0.99, sum by (le) (rate(loom_x_bucket{job=~"$job", le="1"}[$__rate_interval])))'
            ' / on (job) group_left sum without (instance) (up offset 5m) > bool 1e3'),
            {"loom_x_bucket", "up"})
        self.assertEqual(loom_metrics.metric_names_in("a:b:c * 2 and vllm:x"), {"a:b:c", "vllm:x"})

    def test_rules_query_only_known_metrics(self):
        for rule in rules():
            self.assert_known(rule["expr"], rule.get("alert") or rule.get("record"))

    def test_a_misspelt_metric_is_caught(self):
        with self.assertRaises(AssertionError):
            self.assert_known("rate(loom_request_succes_total[5m])", "self-test")
        with self.assertRaises(AssertionError):
            self.assert_known("loom_num_requests_waiting_bucket", "self-test")

    def test_dashboard_is_a_grafana_dashboard_of_known_metrics(self):
        dash = json.loads(DASHBOARD.read_text())
        self.assertEqual(dash["uid"], "loom-overview")
        self.assertIsInstance(dash["schemaVersion"], int)
        panels = list(dashboard_panels(dash))
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        for name in ("job", "instance"):
            query = variables[name]["query"]["query"]
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            self.assertTrue(m, query)
            self.assert_known(m.group(1), f"variable {name}")
        queried = set()
        graphs = [p for p in panels if p["type"] != "row"]
        self.assertGreaterEqual(len(graphs), 15)
        for panel in graphs:
            self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])
            self.assertTrue(panel["targets"], panel["title"])
            for target in panel["targets"]:
                self.assert_known(target["expr"], panel["title"])
                queried |= loom_metrics.metric_names_in(target["expr"])
        # What the issue asks the dashboard to show.
        for series in ("loom_request_success_total", "loom_generation_tokens_total",
                       "loom_time_to_first_token_seconds_bucket",
                       "loom_request_time_per_output_token_seconds_bucket",
                       "loom_inter_token_latency_seconds_bucket", "loom_kv_cache_usage_perc",
                       "loom_prefix_cache_hits_total", "loom_num_preemptions_total",
                       "loom_num_requests_waiting", "loom_migrations_total"):
            self.assertIn(series, queried)


if __name__ == "__main__":
    unittest.main(verbosity=2)
