// Package kubernetes holds the executor's Kubernetes manifests; its tests
// decode every manifest strictly into the k8s.io/api types (an unknown or
// misspelt field fails) and check the security settings README.md
// promises. The k8s.io modules are test dependencies of this directory
// only: no glovebox package imports them.
package kubernetes

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	ns      = "glovebox-executor"
	appName = "glovebox-executor"
	port    = 8443
)

// manifests is every object of one kustomization directory, by kind.
type manifests struct {
	namespaces    []corev1.Namespace
	accounts      []corev1.ServiceAccount
	services      []corev1.Service
	statefulsets  []appsv1.StatefulSet
	deployments   []appsv1.Deployment
	claims        []corev1.PersistentVolumeClaim
	policies      []networkingv1.NetworkPolicy
	pdbs          []policyv1.PodDisruptionBudget
	hpas          []autoscalingv2.HorizontalPodAutoscaler
	runtimeClass  []nodev1.RuntimeClass
	kustomization kustomization
}

// kustomization is the part of kustomize's file these manifests use;
// decoded strictly too, so a misspelt key fails.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path   string `json:"path"`
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
	} `json:"patches,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// documents splits a YAML stream at "---" lines, dropping empty ones.
func documents(data []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func stripComments(d []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// decodeStrict decodes one document into the type its kind names:
// duplicate keys, unknown fields and unknown kinds are errors.
func decodeStrict(doc []byte, m *manifests) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	into := func(dst any) error { return strictJSON(doc, dst) }
	switch head.APIVersion + " " + head.Kind {
	case "v1 Namespace":
		var o corev1.Namespace
		m.namespaces = append(m.namespaces, o)
		return into(&m.namespaces[len(m.namespaces)-1])
	case "v1 ServiceAccount":
		m.accounts = append(m.accounts, corev1.ServiceAccount{})
		return into(&m.accounts[len(m.accounts)-1])
	case "v1 Service":
		m.services = append(m.services, corev1.Service{})
		return into(&m.services[len(m.services)-1])
	case "apps/v1 StatefulSet":
		m.statefulsets = append(m.statefulsets, appsv1.StatefulSet{})
		return into(&m.statefulsets[len(m.statefulsets)-1])
	case "apps/v1 Deployment":
		m.deployments = append(m.deployments, appsv1.Deployment{})
		return into(&m.deployments[len(m.deployments)-1])
	case "v1 PersistentVolumeClaim":
		m.claims = append(m.claims, corev1.PersistentVolumeClaim{})
		return into(&m.claims[len(m.claims)-1])
	case "networking.k8s.io/v1 NetworkPolicy":
		m.policies = append(m.policies, networkingv1.NetworkPolicy{})
		return into(&m.policies[len(m.policies)-1])
	case "policy/v1 PodDisruptionBudget":
		m.pdbs = append(m.pdbs, policyv1.PodDisruptionBudget{})
		return into(&m.pdbs[len(m.pdbs)-1])
	case "autoscaling/v2 HorizontalPodAutoscaler":
		m.hpas = append(m.hpas, autoscalingv2.HorizontalPodAutoscaler{})
		return into(&m.hpas[len(m.hpas)-1])
	case "node.k8s.io/v1 RuntimeClass":
		m.runtimeClass = append(m.runtimeClass, nodev1.RuntimeClass{})
		return into(&m.runtimeClass[len(m.runtimeClass)-1])
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		return into(&m.kustomization)
	}
	return &unknownKind{head.APIVersion, head.Kind}
}

// strictJSON is how the API server reads a manifest under
// fieldValidation=Strict: YAML to JSON refusing duplicate keys, then
// sigs.k8s.io/json's case-sensitive decoder refusing unknown fields.
// (encoding/json matches names case-insensitively, so a misspelt
// readOnlyRootFileSystem would pass it silently.)
func strictJSON(doc []byte, dst any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, dst)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

type unknownKind struct{ apiVersion, kind string }

func (e *unknownKind) Error() string {
	return "no k8s.io/api type for apiVersion " + e.apiVersion + " kind " + e.kind
}

// load decodes every YAML file of dir (not its subdirectories) and checks
// the kustomization lists exactly those files, or those and ../.. .
func load(t *testing.T, dir string) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	m := &manifests{}
	var listed []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := documents(data)
		if len(docs) == 0 {
			t.Errorf("%s: no document", f)
		}
		for i, d := range docs {
			if err := decodeStrict(d, m); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
			}
		}
		if base := filepath.Base(f); base != "kustomization.yaml" {
			listed = append(listed, base)
		}
	}
	k := m.kustomization
	if k.Kind != "Kustomization" {
		t.Fatalf("%s: no kustomization.yaml", dir)
	}
	var patches []string
	for _, p := range k.Patches {
		patches = append(patches, p.Path)
	}
	for _, f := range listed {
		if !slices.Contains(k.Resources, f) && !slices.Contains(patches, f) {
			t.Errorf("%s/%s is neither a resource nor a patch of its kustomization", dir, f)
		}
	}
	for _, r := range append(slices.Clone(k.Resources), patches...) {
		if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
			t.Errorf("%s/kustomization.yaml names %s: %v", dir, r, err)
		}
	}
	return m
}

// add appends o's objects to m (a kustomization and the bases it names).
func (m *manifests) add(o *manifests) {
	m.namespaces = append(m.namespaces, o.namespaces...)
	m.accounts = append(m.accounts, o.accounts...)
	m.services = append(m.services, o.services...)
	m.statefulsets = append(m.statefulsets, o.statefulsets...)
	m.deployments = append(m.deployments, o.deployments...)
	m.claims = append(m.claims, o.claims...)
	m.policies = append(m.policies, o.policies...)
	m.pdbs = append(m.pdbs, o.pdbs...)
	m.hpas = append(m.hpas, o.hpas...)
	m.runtimeClass = append(m.runtimeClass, o.runtimeClass...)
}

// checkCommon asserts what both variants share (common/).
func checkCommon(t *testing.T, m *manifests, podSpec *corev1.PodSpec, labels map[string]string) {
	t.Helper()
	if len(m.namespaces) != 1 || m.namespaces[0].Name != ns ||
		m.namespaces[0].Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("want namespace %s enforcing the restricted pod security standard: %+v", ns, m.namespaces)
	}
	if len(m.accounts) != 1 || m.accounts[0].Name != podSpec.ServiceAccountName ||
		m.accounts[0].AutomountServiceAccountToken == nil || *m.accounts[0].AutomountServiceAccountToken {
		t.Errorf("want the pods' ServiceAccount with automountServiceAccountToken: false: %+v", m.accounts)
	}
	checkNetworkPolicies(t, m.policies, labels)
	for _, s := range m.services {
		checkNamespaced(t, "Service "+s.Name, s.Namespace)
		if !matches(s.Spec.Selector, labels) {
			t.Errorf("Service %s selects %v, not the executor's pods", s.Name, s.Spec.Selector)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != port || s.Spec.Ports[0].TargetPort.StrVal != "https" {
			t.Errorf("Service %s ports %+v", s.Name, s.Spec.Ports)
		}
	}
}

func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	// The misspelling a reviewer would miss: FileSystem for Filesystem.
	doc := []byte(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: x}
spec:
  template:
    spec:
      containers:
        - name: c
          securityContext:
            readOnlyRootFileSystem: true
`)
	if err := decodeStrict(doc, &manifests{}); err == nil || !strings.Contains(err.Error(), "readOnlyRootFileSystem") {
		t.Fatalf("misspelt field decoded: %v", err)
	}
	dup := []byte("apiVersion: v1\nkind: Service\nmetadata: {name: a, name: b}\n")
	if err := decodeStrict(dup, &manifests{}); err == nil {
		t.Fatal("duplicate key decoded")
	}
	if err := decodeStrict([]byte("apiVersion: v1\nkind: Pod\n"), &manifests{}); err == nil {
		t.Fatal("a kind without a check decoded")
	}
}

func TestBase(t *testing.T) {
	m := load(t, ".")
	m.add(load(t, "common"))
	if m.kustomization.Namespace != ns {
		t.Errorf("kustomization namespace %q", m.kustomization.Namespace)
	}
	if len(m.statefulsets) != 1 || len(m.deployments) != 0 {
		t.Fatalf("want one StatefulSet and no Deployment, have %d and %d", len(m.statefulsets), len(m.deployments))
	}
	ss := m.statefulsets[0]
	checkNamespaced(t, "StatefulSet", ss.Namespace)
	checkPod(t, &ss.Spec.Template, storeTemplate)
	if ss.Spec.Template.Spec.RuntimeClassName != nil {
		t.Errorf("the base sets runtimeClassName %q; gVisor is the overlay's choice", *ss.Spec.Template.Spec.RuntimeClassName)
	}
	if r := ss.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("replicas %v: want at least 2 so the PDB lets a drain proceed", r)
	}
	labels := ss.Spec.Template.Labels
	if !matches(ss.Spec.Selector.MatchLabels, labels) {
		t.Errorf("the StatefulSet's selector %v does not select its own pods %v", ss.Spec.Selector.MatchLabels, labels)
	}
	// The store is a claim of each pod's own, kept when pods go.
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "store" {
		t.Errorf("want one volume claim template named store, have %v", ss.Spec.VolumeClaimTemplates)
	}
	for _, v := range ss.Spec.Template.Spec.Volumes {
		if v.Name == "store" {
			t.Error("the store is a pod volume; it must be the claim template, which outlives the pod")
		}
	}
	if p := ss.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("the stores must be retained when pods are scaled away or deleted: %+v", p)
	}
	checkCommon(t, m, &ss.Spec.Template.Spec, labels)
	// A headless Service governs the StatefulSet (per-pod names).
	var governing bool
	for _, s := range m.services {
		if s.Name == ss.Spec.ServiceName {
			governing = s.Spec.ClusterIP == corev1.ClusterIPNone
		}
	}
	if !governing {
		t.Errorf("no headless Service named %q governs the StatefulSet", ss.Spec.ServiceName)
	}

	if len(m.pdbs) != 1 {
		t.Fatalf("want one PodDisruptionBudget, have %d", len(m.pdbs))
	}
	pdb := m.pdbs[0]
	checkNamespaced(t, "PodDisruptionBudget", pdb.Namespace)
	if !matches(pdb.Spec.Selector.MatchLabels, labels) {
		t.Errorf("the PDB selects %v", pdb.Spec.Selector.MatchLabels)
	}
	if u := pdb.Spec.MaxUnavailable; u == nil || u.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1", u)
	}

	if len(m.hpas) != 1 {
		t.Fatalf("want one HorizontalPodAutoscaler, have %d", len(m.hpas))
	}
	h := m.hpas[0]
	checkNamespaced(t, "HorizontalPodAutoscaler", h.Namespace)
	if h.Spec.ScaleTargetRef.Kind != "StatefulSet" || h.Spec.ScaleTargetRef.Name != ss.Name || h.Spec.ScaleTargetRef.APIVersion != "apps/v1" {
		t.Errorf("the HPA scales %+v, not the executor", h.Spec.ScaleTargetRef)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
		t.Errorf("HPA bounds %v..%d", h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	if len(h.Spec.Metrics) == 0 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
		t.Errorf("the HPA should follow CPU: %+v", h.Spec.Metrics)
	}
	if b := h.Spec.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.SelectPolicy == nil || *b.ScaleDown.SelectPolicy != autoscalingv2.DisabledPolicySelect {
		t.Error("the HPA may scale down on its own: that moves idempotency keys away from their stores (README.md)")
	}

	// The commented variant the README points at.
	data, _ := os.ReadFile("statefulset.yaml")
	if !bytes.Contains(data, []byte("# runtimeClassName: gvisor")) {
		t.Error("statefulset.yaml no longer shows runtimeClassName: gvisor as an option")
	}
}

// loadDeployment loads dir with common, which it must build on, and
// returns its one Deployment (and no StatefulSet), its pod checked.
func loadDeployment(t *testing.T, dir string, store storeAt) (*manifests, appsv1.Deployment) {
	t.Helper()
	m := load(t, dir)
	m.add(load(t, "common"))
	if !slices.Contains(m.kustomization.Resources, "../common") || m.kustomization.Namespace != ns {
		t.Errorf("%s does not build on common: %+v", dir, m.kustomization)
	}
	if len(m.deployments) != 1 || len(m.statefulsets) != 0 {
		t.Fatalf("%s: want one Deployment, no StatefulSet: %d %d", dir, len(m.deployments), len(m.statefulsets))
	}
	d := m.deployments[0]
	checkNamespaced(t, "Deployment", d.Namespace)
	checkPod(t, &d.Spec.Template, store)
	return m, d
}

// TestSingle: the one-executor variant is a Deployment held to the same
// pod hardening, a singleton (one replica, Recreate) whose store is a
// claim apart from the pod.
func TestSingle(t *testing.T) {
	m, d := loadDeployment(t, "single", storeClaim)
	if len(m.hpas) != 0 {
		t.Errorf("want no HPA: %d", len(m.hpas))
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("the single executor must be one replica, replaced with Recreate (one writer on its store): %v %s", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	if !matches(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("the Deployment's selector does not select its pods")
	}
	var claim string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "store" && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if len(m.claims) != 1 || claim == "" || m.claims[0].Name != claim || !slices.Contains(m.claims[0].Spec.AccessModes, corev1.ReadWriteOnce) {
		t.Errorf("the store volume %q is not the claim in store.yaml: %+v", claim, m.claims)
	}
	checkCommon(t, m, &d.Spec.Template.Spec, d.Spec.Template.Labels)
	// The same pod as the fleet's, store volume aside.
	fleet := load(t, ".").statefulsets[0].Spec.Template
	if !reflect.DeepEqual(fleet.Spec.Containers, d.Spec.Template.Spec.Containers) ||
		!reflect.DeepEqual(fleet.Spec.SecurityContext, d.Spec.Template.Spec.SecurityContext) {
		t.Error("the single executor's containers or pod security differ from the fleet's")
	}
}

func TestGVisorOverlay(t *testing.T) {
	m := checkGVisorOverlay(t, "gvisor", "../..", "StatefulSet")
	if len(m.statefulsets) != 1 {
		t.Fatalf("want one StatefulSet patch, have %d", len(m.statefulsets))
	}
	checkRuntimePatch(t, m, &m.statefulsets[0].Spec.Template, m.statefulsets[0].Name)
}

// TestGVisorPostgresOverlay: the PostgreSQL fleet has its gVisor overlay
// too, patching its Deployment.
func TestGVisorPostgresOverlay(t *testing.T) {
	m := checkGVisorOverlay(t, "gvisor-postgres", "../../postgres", "Deployment")
	if len(m.deployments) != 1 {
		t.Fatalf("want one Deployment patch, have %d", len(m.deployments))
	}
	checkRuntimePatch(t, m, &m.deployments[0].Spec.Template, m.deployments[0].Name)
}

// checkGVisorOverlay loads overlays/dir and checks it builds on base and
// makes RuntimeClass gvisor with one patch of a kind.
func checkGVisorOverlay(t *testing.T, dir, base, kind string) *manifests {
	t.Helper()
	m := load(t, filepath.Join("overlays", dir))
	if !slices.Contains(m.kustomization.Resources, base) {
		t.Errorf("the overlay does not build on %s: %v", base, m.kustomization.Resources)
	}
	if len(m.runtimeClass) != 1 || m.runtimeClass[0].Name != "gvisor" || m.runtimeClass[0].Handler != "runsc" {
		t.Errorf("want RuntimeClass gvisor with handler runsc: %+v", m.runtimeClass)
	}
	if len(m.kustomization.Patches) != 1 || m.kustomization.Patches[0].Target.Kind != kind {
		t.Errorf("want one patch of the %s: %+v", kind, m.kustomization.Patches)
	}
	return m
}

// checkRuntimePatch checks the overlay's patch (pod template tmpl of the
// object named name) sets runtimeClassName gvisor on the executor.
func checkRuntimePatch(t *testing.T, m *manifests, tmpl *corev1.PodTemplateSpec, name string) {
	t.Helper()
	if rc := tmpl.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("the patch sets runtimeClassName %v", rc)
	}
	if m.kustomization.Patches[0].Target.Name != name || name != appName {
		t.Errorf("the patch does not target the executor: %+v", m.kustomization.Patches)
	}
}

func checkNamespaced(t *testing.T, what, got string) {
	t.Helper()
	if got != ns {
		t.Errorf("%s is in namespace %q, want %q", what, got, ns)
	}
}

// matches reports whether every key of sel is in labels with its value.
func matches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkPod asserts the pod hardening README.md lists; claimTemplate says
// the store comes from a StatefulSet's claim template (else from a pod
// volume).
// storeAt is where a pod's idempotency store lives.
type storeAt int

const (
	storeClaim    storeAt = iota // a pod volume from a claim of its own (single)
	storeTemplate                // the StatefulSet's claim template (the fleet)
	storeDatabase                // PostgreSQL: no store volume at all
)

func checkPod(t *testing.T, tmpl *corev1.PodTemplateSpec, store storeAt) {
	t.Helper()
	spec := tmpl.Spec
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Error("the pod shares a host namespace")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token")
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Fatalf("the pod is not pinned to a non-root user: %+v", psc)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 60 {
		t.Error("the grace period is shorter than a run's default timeout (60 s): a drain would cut runs")
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Errorf("container %s runs as root", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s: capabilities %+v, want drop [ALL] and no add", c.Name, sc.Capabilities)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s: seccomp %+v", c.Name, sc.SeccompProfile)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okr := c.Resources.Requests[r]
			lim, okl := c.Resources.Limits[r]
			if !okr || !okl || req.IsZero() || lim.Cmp(req) < 0 {
				t.Errorf("container %s: %s request %v limit %v", c.Name, r, req.String(), lim.String())
			}
		}
	}
	var ex *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "executor" {
			ex = &spec.Containers[i]
		}
	}
	if ex == nil {
		t.Fatal("no container named executor")
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Port.StrVal != "https" {
			t.Errorf("%s probe %+v, want HTTPS GET %s on the https port", name, p, path)
		}
	}
	probe("readiness", ex.ReadinessProbe, "/readyz")
	probe("liveness", ex.LivenessProbe, "/healthz")
	if len(ex.Ports) != 1 || ex.Ports[0].Name != "https" || ex.Ports[0].ContainerPort != port {
		t.Errorf("executor ports %+v", ex.Ports)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ex.VolumeMounts {
		mounts[m.Name] = m
	}
	for _, name := range []string{"tls", "tenants"} {
		v, m := volumes[name], mounts[name]
		if v.Secret == nil || v.Secret.SecretName == "" {
			t.Errorf("volume %s is not a Secret: %+v", name, v)
		} else if mode := v.Secret.DefaultMode; mode == nil || *mode&0o007 != 0 {
			t.Errorf("secret volume %s is readable by others (mode %v)", name, mode)
		}
		if m.MountPath == "" || !m.ReadOnly {
			t.Errorf("secret %s is not mounted read-only: %+v", name, m)
		}
	}
	if m, ok := mounts["store"]; store == storeDatabase {
		if ok {
			t.Errorf("a store mount %+v: the store is the database", m)
		}
	} else if m.MountPath == "" || m.ReadOnly {
		t.Errorf("the store is not mounted writable: %+v", m)
	}
	if v, ok := volumes["store"]; store != storeDatabase && (ok == (store == storeTemplate) || (ok && v.PersistentVolumeClaim == nil)) {
		t.Errorf("the store volume %+v: want a claim that outlives the pod", v)
	}
	for _, name := range []string{"scratch", "cache"} {
		if v := volumes[name]; v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
			t.Errorf("volume %s is not a size-limited emptyDir: %+v", name, v)
		}
	}
	if mounts["scratch"].MountPath != "/tmp" {
		t.Error("scratch is not /tmp: with a read-only root filesystem runs have nowhere to write")
	}
	if v := volumes["shm"]; v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || mounts["shm"].MountPath != "/dev/shm" {
		t.Errorf("/dev/shm (evals' scratch) is not a size-limited memory emptyDir: %+v", v)
	}
	// The drain the executor gets on SIGTERM, plus 5 s to close its
	// streams, must end before the kubelet's SIGKILL.
	for _, a := range ex.Args {
		if d, ok := strings.CutPrefix(a, "--drain="); ok {
			dur, err := time.ParseDuration(d)
			if err != nil || dur+5*time.Second >= time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second {
				t.Errorf("--drain=%s does not end before the grace period of %ds", d, *spec.TerminationGracePeriodSeconds)
			}
		}
	}
	// Every flag the pod passes is one `glovebox executor` defines.
	var src []byte
	for _, f := range []string{"executor.go", "executor_evals.go"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "cmd", "glovebox", f))
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	if len(ex.Args) == 0 || ex.Args[0] != "executor" {
		t.Errorf("the container does not run `glovebox executor`: %q", ex.Args)
	}
	for _, a := range ex.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !bytes.Contains(src, []byte(`"`+name+`"`)) {
			t.Errorf("argument %q is not a flag of glovebox executor", a)
		}
	}
	args := strings.Join(ex.Args, " ")
	for _, want := range []string{mounts["tls"].MountPath, mounts["tenants"].MountPath, mounts["store"].MountPath} {
		if !strings.Contains(args, want) {
			t.Errorf("the executor's arguments %q never name %s", args, want)
		}
	}
}

// checkNetworkPolicies asserts default deny in both directions, no
// egress anywhere, and ingress only to the executor's port from the
// application's and monitoring's namespaces.
func checkNetworkPolicies(t *testing.T, ps []networkingv1.NetworkPolicy, labels map[string]string) {
	t.Helper()
	var denyAll, ingress bool
	for _, p := range ps {
		checkNamespaced(t, "NetworkPolicy "+p.Name, p.Namespace)
		if len(p.Spec.Egress) > 0 {
			t.Errorf("NetworkPolicy %s allows egress %+v", p.Name, p.Spec.Egress)
		}
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 {
			if slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) && slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
				len(p.Spec.Ingress) == 0 {
				denyAll = true
			} else {
				t.Errorf("NetworkPolicy %s selects every pod but is not a deny-all: %+v", p.Name, p.Spec)
			}
			continue
		}
		if !matches(p.Spec.PodSelector.MatchLabels, labels) {
			t.Errorf("NetworkPolicy %s selects %v", p.Name, p.Spec.PodSelector.MatchLabels)
		}
		for _, r := range p.Spec.Ingress {
			if len(r.Ports) != 1 || r.Ports[0].Port == nil || r.Ports[0].Port.IntValue() != port {
				t.Errorf("NetworkPolicy %s opens ports %+v", p.Name, r.Ports)
			}
			if len(r.From) == 0 {
				t.Errorf("NetworkPolicy %s admits every source", p.Name)
			}
			for _, f := range r.From {
				if f.IPBlock != nil || f.PodSelector != nil || f.NamespaceSelector == nil {
					t.Errorf("NetworkPolicy %s admits %+v; only whole namespaces by name", p.Name, f)
					continue
				}
				n := f.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
				if n != "app" && n != "monitoring" {
					t.Errorf("NetworkPolicy %s admits namespace %q", p.Name, n)
				}
				ingress = ingress || n == "app"
			}
		}
	}
	if !denyAll {
		t.Error("no default-deny NetworkPolicy (all pods, Ingress and Egress, no rules)")
	}
	if !ingress {
		t.Error("no NetworkPolicy admits the application's namespace")
	}
}

// TestPostgresFleet: the fleet on PostgreSQL is a Deployment (no
// StatefulSet, no store volume) of at least two hardened replicas that
// roll without a gap, behind one Service, with an HPA and a PDB on them;
// the store's URL comes from a Secret (never argv), and the only egress
// is PostgreSQL's port and DNS.
func TestPostgresFleet(t *testing.T) {
	m, d := loadDeployment(t, "postgres", storeDatabase)
	if len(m.claims) != 0 {
		t.Errorf("want no claim: %+v", m.claims)
	}
	if r := d.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("replicas %v: want at least 2", r)
	}
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("want a rolling update that keeps every replica until its successor is ready: %+v", d.Spec.Strategy)
	}
	if !matches(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("the Deployment's selector does not select its pods")
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "store" || v.PersistentVolumeClaim != nil {
			t.Errorf("volume %s: the fleet's store is the database, no volume", v.Name)
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	var fromSecret bool
	for _, e := range c.Env {
		if e.Name == "GLOVEBOX_STORE_URL" {
			fromSecret = e.Value == "" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "glovebox-executor-postgres"
		}
	}
	if !fromSecret {
		t.Error("GLOVEBOX_STORE_URL must come from the Secret glovebox-executor-postgres")
	}
	// Every replica seals sessions and paused evals with one key, a
	// Secret mounted read-only, unreadable by others.
	var keyVol *corev1.Volume
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "state-key" {
			keyVol = &d.Spec.Template.Spec.Volumes[i]
		}
	}
	if keyVol == nil || keyVol.Secret == nil || keyVol.Secret.SecretName != "glovebox-executor-state-key" ||
		keyVol.Secret.DefaultMode == nil || *keyVol.Secret.DefaultMode&0o007 != 0 {
		t.Errorf("want the state key from the Secret glovebox-executor-state-key, mode without others' bits: %+v", keyVol)
	}
	keyMounted := false
	for _, vm := range c.VolumeMounts {
		if vm.Name == "state-key" {
			keyMounted = vm.ReadOnly && slices.Contains(c.Args, "--state-key="+vm.MountPath+"/key")
		}
	}
	if !keyMounted {
		t.Errorf("the state key is not mounted read-only and named by --state-key: %q", c.Args)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--store") {
			t.Errorf("arg %q: the store URL (with its password) belongs in the Secret, not argv", a)
		}
	}
	if len(m.hpas) != 1 || m.hpas[0].Spec.ScaleTargetRef.Kind != "Deployment" || m.hpas[0].Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("want an HPA on the Deployment: %+v", m.hpas)
	}
	if len(m.pdbs) != 1 || !matches(m.pdbs[0].Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("want a PDB selecting the replicas: %+v", m.pdbs)
	}
	// The egress policy is checked here; the others as everywhere.
	var rest []networkingv1.NetworkPolicy
	var egress *networkingv1.NetworkPolicy
	for i, p := range m.policies {
		if len(p.Spec.Egress) > 0 {
			egress = &m.policies[i]
			continue
		}
		rest = append(rest, p)
	}
	if egress == nil || !matches(egress.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) || len(egress.Spec.Ingress) != 0 {
		t.Fatalf("want one egress policy for the executors: %+v", egress)
	}
	for _, r := range egress.Spec.Egress {
		if len(r.To) == 0 {
			t.Errorf("egress %+v reaches everything", r)
		}
		for _, to := range r.To {
			if to.IPBlock != nil || to.NamespaceSelector == nil || to.PodSelector == nil {
				t.Errorf("egress to %+v: want named pods of a named namespace", to)
			}
		}
		for _, p := range r.Ports {
			if n := p.Port.IntValue(); n != 5432 && n != 53 {
				t.Errorf("egress opens port %d: only PostgreSQL's 5432 and DNS", n)
			}
		}
	}
	m.policies = rest
	checkCommon(t, m, &d.Spec.Template.Spec, d.Spec.Template.Labels)
}
