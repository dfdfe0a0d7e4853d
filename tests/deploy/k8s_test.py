#!/usr/bin/env python3
"""deploy/k8s/, rendered and validated offline (tests/run.sh's deployment stage, part c).

There is no kubectl or kustomize on the test machines (Debian 12 packages neither), so
render() below builds the objects from the kustomizations itself. It implements exactly the
kustomize fields deploy/k8s/ uses (resources, components, images, patches with JSON 6902
operations and a kind/name target) and refuses any other field, so a kustomization that starts
using more fails here rather than rendering wrong. Every object of the base alone and of the base
with each component (and with all of them) is then:

  - validated against the Kubernetes OpenAPI schemas (PyPI kubernetes-validate, strict: unknown
    fields are errors) for the oldest and the newest Kubernetes version checked;
  - checked for what the deployment needs: the probes on /readyz and /livez, a preStop hook and
    LOOM_DRAIN_TIMEOUT_S that fit in the termination grace period, resources, /dev/shm and a GPU
    in the GPU case, Prometheus annotations, selectors of the Service, PDB, ServiceMonitor and HPA
    that match the pods, and LOOM_* variables that are all keys loomd knows.

  python3 tests/deploy/k8s_test.py
"""
import copy
import itertools
import pathlib
import re
import sys
import unittest

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPONENTS = ["gpu", "hpa", "servicemonitor", "manager"]
# The oldest Kubernetes still commonly run, and the newest the schemas know.
VERSIONS = ["1.29", kubernetes_validate.latest_version()]
KNOWN_FIELDS = {"apiVersion", "kind", "resources", "components", "patches", "images"}


def _pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(doc, ops):
    """RFC 6902 add, replace and remove (what deploy/k8s/ uses)."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        kind = op["op"]
        if kind == "add":
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            if isinstance(node, list):
                node[int(last)] = copy.deepcopy(op["value"])
            else:
                if last not in node:
                    raise AssertionError(f"replace of a missing {op['path']}")
                node[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            raise AssertionError(f"JSON patch op {kind!r} is not implemented by this test")


def set_images(objects, images):
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            image = container["image"]
            name, tag = image, None
            if ":" in image.rsplit("/", 1)[-1]:
                name, tag = image.rsplit(":", 1)
            for entry in images:
                if entry["name"] == name:
                    name = entry.get("newName", name)
                    tag = entry.get("newTag", tag)
            container["image"] = name + (":" + tag if tag else "")


def apply_transformers(objects, kustomization, where):
    for patch in kustomization.get("patches", []):
        if set(patch) != {"target", "patch"} or set(patch["target"]) != {"kind", "name"}:
            raise AssertionError(f"{where}: only patches with a kind/name target are implemented")
        targets = [o for o in objects if o["kind"] == patch["target"]["kind"]
                   and o["metadata"]["name"] == patch["target"]["name"]]
        if not targets:
            raise AssertionError(f"{where}: patch target {patch['target']} matches nothing")
        for obj in targets:
            json_patch(obj, yaml.safe_load(patch["patch"]))
    set_images(objects, kustomization.get("images", []))


def render(directory, extra_components=()):
    """The objects `kustomize build directory` gives, with extra_components added as an
    overlay's `components:` would add them."""
    directory = pathlib.Path(directory)
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN_FIELDS
    if unknown:
        raise AssertionError(f"{directory}: {sorted(unknown)} not implemented by this test's renderer")
    objects = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects.extend(render(path))
        else:
            objects.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    for component in list(kustomization.get("components", [])) + [str(K8S / "components" / c) for c in extra_components]:
        cdir = (directory / component).resolve()
        ck = yaml.safe_load((cdir / "kustomization.yaml").read_text())
        if ck["kind"] != "Component" or set(ck) - KNOWN_FIELDS:
            raise AssertionError(f"{cdir}: not a Component of the implemented fields")
        for entry in ck.get("resources", []):
            objects.extend(d for d in yaml.safe_load_all((cdir / entry).read_text()) if d)
        apply_transformers(objects, ck, cdir)
    apply_transformers(objects, kustomization, directory)
    return objects


def find(objects, kind, name):
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def loomd_config_keys():
    """LOOM_<KEY> for every key of loomd's key table (server/config/server_config.cc)."""
    text = (ROOT / "server" / "config" / "server_config.cc").read_text()
    keys = re.findall(r'^\s*\{"([a-z][a-z0-9_]*)",', text, re.M)
    assert len(keys) > 30, "the key table of server_config.cc was not found"
    return {"LOOM_" + k.upper() for k in keys}


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class RenderTest(unittest.TestCase):
    def test_renderer_applies_patches_and_images(self):
        doc = {"a": [1, 2], "b": {"c": 1}}
        json_patch(doc, [{"op": "add", "path": "/a/-", "value": 3},
                         {"op": "replace", "path": "/b/c", "value": 2},
                         {"op": "add", "path": "/b/d~1e", "value": 4},
                         {"op": "remove", "path": "/a/0"}])
        self.assertEqual(doc, {"a": [2, 3], "b": {"c": 2, "d/e": 4}})
        with self.assertRaises(AssertionError):
            json_patch(doc, [{"op": "replace", "path": "/b/missing", "value": 1}])
        objs = [{"spec": {"template": {"spec": {"containers": [{"image": "localhost/loom:cpu"}]}}}}]
        set_images(objs, [{"name": "localhost/loom", "newTag": "cuda"}])
        set_images(objs, [{"name": "localhost/loom", "newName": "registry.example/loom"}])
        self.assertEqual(objs[0]["spec"]["template"]["spec"]["containers"][0]["image"],
                         "registry.example/loom:cuda")

    def test_schema_validation_catches_a_bad_object(self):
        deployment = find(render(K8S / "base"), "Deployment", "loom")
        bad = copy.deepcopy(deployment)
        bad["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["httpGet"]["paht"] = "/x"
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, VERSIONS[0], strict=True)


class ManifestsTest(unittest.TestCase):
    def variants(self):
        yield "base", render(K8S / "base")
        for c in COMPONENTS:
            yield f"base+{c}", render(K8S / "base", [c])
        yield "base+all", render(K8S / "base", COMPONENTS)

    def test_every_object_is_valid_for_kubernetes(self):
        count = 0
        for name, objects in self.variants():
            for obj, version in itertools.product(objects, VERSIONS):
                if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                    continue  # a CRD: checked by test_servicemonitor_selects_the_service
                with self.subTest(variant=name, object=f"{obj['kind']}/{obj['metadata']['name']}",
                                  version=version):
                    kubernetes_validate.validate(obj, version, strict=True)
                    count += 1
        self.assertGreater(count, 40)

    def test_instance_lifecycle(self):
        for name, objects in self.variants():
            with self.subTest(variant=name):
                dep = find(objects, "Deployment", "loom")
                pod = dep["spec"]["template"]["spec"]
                (c,) = [c for c in pod["containers"] if c["name"] == "loomd"]
                self.assertEqual(c["startupProbe"]["httpGet"]["path"], "/readyz")
                self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
                self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/livez")
                env = {e["name"]: e for e in c["env"]}
                drain_s = int(env["LOOM_DRAIN_TIMEOUT_S"]["value"])
                pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
                self.assertEqual(pre_stop[0], "sleep")
                grace_s = pod["terminationGracePeriodSeconds"]
                self.assertLess(int(pre_stop[1]) + drain_s, grace_s,
                                "preStop + drain must end before the kill at the grace period")
                for kind in ("requests", "limits"):
                    self.assertIn("cpu", c["resources"][kind])
                    self.assertIn("memory", c["resources"][kind])
                annotations = dep["spec"]["template"]["metadata"]["annotations"]
                self.assertEqual(annotations["prometheus.io/scrape"], "true")
                port = int(annotations["prometheus.io/port"])
                self.assertIn(port, [p["containerPort"] for p in c["ports"]])
                self.assertEqual(env["LOOM_PORT"]["value"], str(port))
                self.assertEqual(dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0)

    def test_gpu_variant(self):
        dep = find(render(K8S / "base", ["gpu"]), "Deployment", "loom")
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], "1")
        self.assertTrue(c["image"].endswith(":cuda"), c["image"])
        self.assertIn({"name": "LOOM_BACKEND", "value": "cuda"}, c["env"])
        shm = [v for v in pod["volumes"] if v["name"] == "dshm"]
        self.assertEqual(shm[0]["emptyDir"]["medium"], "Memory")
        self.assertIn({"name": "dshm", "mountPath": "/dev/shm"}, c["volumeMounts"])

    def test_selectors_match_the_pods(self):
        objects = render(K8S / "base", COMPONENTS)
        pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
                for d in objects if d["kind"] == "Deployment"}
        for dep in (o for o in objects if o["kind"] == "Deployment"):
            self.assertTrue(selects(dep["spec"]["selector"]["matchLabels"], pods[dep["metadata"]["name"]]))
        svc = find(objects, "Service", "loom")
        self.assertTrue(selects(svc["spec"]["selector"], pods["loom"]))
        self.assertFalse(selects(svc["spec"]["selector"], pods["loom-manager"]),
                         "the instances' Service must not send requests to the manager")
        self.assertTrue(selects(find(objects, "Service", "loom-manager")["spec"]["selector"], pods["loom-manager"]))
        pdb = find(objects, "PodDisruptionBudget", "loom")
        self.assertTrue(selects(pdb["spec"]["selector"]["matchLabels"], pods["loom"]))
        hpa = find(objects, "HorizontalPodAutoscaler", "loom")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], "loom")
        self.assertEqual(hpa["spec"]["metrics"][0]["pods"]["metric"]["name"], "loom_num_requests_waiting")
        volumes = find(objects, "Deployment", "loom")["spec"]["template"]["spec"]["volumes"]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v}
        self.assertEqual(claims, {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"})

    def test_servicemonitor_selects_the_service(self):
        objects = render(K8S / "base", ["servicemonitor"])
        sm = find(objects, "ServiceMonitor", "loom")
        self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
        svc = find(objects, "Service", "loom")
        self.assertTrue(selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]))
        self.assertIn(sm["spec"]["endpoints"][0]["port"], [p["name"] for p in svc["spec"]["ports"]])
        self.assertEqual(sm["spec"]["endpoints"][0]["path"], "/metrics")

    def test_loom_variables_are_keys_loomd_knows(self):
        known = loomd_config_keys()
        self.assertIn("LOOM_DRAIN_TIMEOUT_S", known)
        files = list(K8S.rglob("*.yaml")) + list((ROOT / "deploy" / "docker").glob("*"))
        used = set()
        for path in files:
            used |= set(re.findall(r"\bLOOM_[A-Z0-9_]+\b", path.read_text()))
        # Not loomd settings: the CMake option the CUDA image build passes on.
        used -= {"LOOM_CUDA_ARCHITECTURES"}
        self.assertTrue(used)
        self.assertFalse(used - known, f"not loomd settings: {sorted(used - known)}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
