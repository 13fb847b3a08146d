# The two commands that matter:
#   make dev    a local control plane with the extension registered (.dev/kubeconfig)
#   make test   every test, against real etcd, kube-apiserver, kube-controller-manager and kubectl
# and:
#   make down   stop what `make dev` started
#   make lint   rustfmt and clippy, as CI runs them
#   make release   the release binaries: the server (the Dockerfile builds it alone) and the plugin (CI builds both)
#   make tools  only build the pinned etcd, Kubernetes and CSI binaries, krew, Prometheus, Helm and the client-go test program (cached outside the tree)
#   make fresh-check   run the README's commands on a bare Debian root, as on a new machine
#   make openapi   rewrite the checked-in OpenAPI documents under openapi/ from the code
#   make bench   our server against the same schema as a CRD, side by side (docs/benchmarks.md)
#   make bench-core   our server alone on etcd: throughput, latency, watch fan-out
#   make bench-auth   the per-request cost of delegated authn/authz (SAR cache warm and cold)
#   make diagrams   redraw docs/diagrams/*.svg from their .dot sources (needs graphviz)

CARGO ?= cargo
DEV_DIR ?= $(CURDIR)/.dev

.PHONY: dev down test lint release tools kube prereqs bench bench-core bench-auth openapi fresh-check diagrams chaos

prereqs:
	@hack/prereqs.sh

# etcd 3.6, kube-apiserver, kube-controller-manager, kubectl, the CSI stack,
# Prometheus and promtool (tests/monitoring.rs), Helm (tests/helm.rs),
# krew (crates/kubectl-transfer/tests/krew.rs installs the plugin with it) and the client-go test
# program (tests/clientgo), each pinned under hack/ and built once into
# ~/.cache/storage-transfer-apiserver, side by side (hack/build-tools.sh).
tools: prereqs
	@hack/build-tools.sh

kube: tools

dev: tools
	$(CARGO) build --locked -p storage-transfer-apiserver -p kubectl-transfer
	ln -sf kubectl-transfer target/debug/kubectl_complete-transfer
	$(CARGO) build --locked -p sta-testenv --bin devenv
	target/debug/devenv up --dir $(DEV_DIR) --server-bin target/debug/storage-transfer-apiserver

down:
	@$(CARGO) build --quiet --locked -p sta-testenv --bin devenv
	@target/debug/devenv down --dir $(DEV_DIR)

test: tools
	hack/test.sh

# The chaos soak (tests/chaos.rs) at full size: 200 pairs through 10 minutes
# of faults; the report goes to target/chaos/report.md. CHAOS_PAIRS,
# CHAOS_FAULT_SECONDS and CHAOS_SEED change it; `make test` runs it small.
CHAOS_PAIRS ?= 200
CHAOS_FAULT_SECONDS ?= 600
chaos: tools
	CHAOS_PAIRS=$(CHAOS_PAIRS) CHAOS_FAULT_SECONDS=$(CHAOS_FAULT_SECONDS) \
	  CHAOS_REPORT=$(CURDIR)/target/chaos/report.md \
	  $(CARGO) test --locked --features fault-injection --test chaos -- --nocapture

# The README's two commands (`make test` whole; STA_TEST_SAMPLE=1 samples it),
# the demo transfer and `make down`, from a clone, in a bare Debian root with
# only the toolchains: what a new machine would do. CI runs its suite there.
fresh-check:
	hack/fresh-check.sh

# Our server (direct and through the aggregator) against the same schema as a CRD
# in kube-apiserver, then transfers at scale: rewrites docs/benchmarks.md and its plots.
# BENCH_SCALE=0.01 BENCH_OUT=<dir> runs it tiny and writes elsewhere.
# BENCH_PROFILE=dev builds it unoptimized, reusing what `make test` built: CI
# does, to prove that the benchmark runs end to end; its figures then mean
# nothing, and the benchmark says so in what it writes.
BENCH_PROFILE ?= bench
bench: tools
	$(CARGO) bench --locked --profile $(BENCH_PROFILE) --bench compare
	$(CARGO) bench --locked --profile $(BENCH_PROFILE) --bench scale

# Our server alone on etcd: create/get/list throughput and latency, watch fan-out.
# BENCH_SCALE=0.01 runs it tiny.
bench-core: tools
	$(CARGO) bench --locked --bench core

# What delegated authn/authz cost per request: no auth, authn only, SAR cache warm and cold.
bench-auth: tools
	$(CARGO) bench --locked --bench auth

# The release binaries: the server, as the Dockerfile builds it, and the
# plugin, as krew packages it.
release: prereqs
	$(CARGO) build --locked --release -p storage-transfer-apiserver -p kubectl-transfer

lint: prereqs
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(CARGO) clippy --workspace --all-targets --locked --features fault-injection -- -D warnings

# The OpenAPI documents under openapi/ are generated from the API types; a test
# fails when they drift. This rewrites them.
openapi: prereqs
	UPDATE_OPENAPI=1 $(CARGO) test --locked --test openapi checked_in_openapi_matches_the_code

# The diagrams under docs/diagrams/ are drawn from their Graphviz sources;
# this redraws every .svg from its .dot.
diagrams:
	@command -v dot >/dev/null || { echo "make diagrams needs graphviz's dot (Debian: apt-get install -y graphviz)" >&2; exit 1; }
	@for f in docs/diagrams/*.dot; do echo "dot -Tsvg $$f -o $${f%.dot}.svg"; dot -Tsvg "$$f" -o "$${f%.dot}.svg" || exit 1; done
