# efakit: make test is what CI runs (.ci/run).
GO       ?= go
PKGS     := ./...
## MODULES: the library (the repository's root) and the kubelet plugin with
## the CLI (plugin/), each a module of its own; every Go target runs in both.
MODULES  := . plugin
FUZZTIME ?= 20s
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all test e2e-build lint unit stress bench-check karpenter karpenter-update e2e-deps e2e rdma-kernel image image-check modzip fixtures bench bench-compare fuzz build clean

all: build test

## test: everything CI checks: format, vet, unit tests with the race
## detector (fuzz seed corpora included), fixture drift, the models against
## Karpenter's real-node data, the e2e tests, the image, module zip. The
## e2e binaries are built first (make e2e-build: the machine's CPUs are
## the limit); then the e2e tests, which mostly wait on the real node, run
## beside lint, unit, bench-check and karpenter, which fill those waits
## (the e2e lines are prefixed "e2e| "); then image-check and modzip. Each
## step alone: make <step>.
test: e2e-deps bin/testtimes
	$(MAKE) --no-print-directory e2e-build
	@bash -c 'set -o pipefail; \
	  { $(MAKE) --no-print-directory e2e; echo $$? > bin/e2e.rc; } 2>&1 | sed -u "s/^/e2e| /" & e2e=$$!; \
	  $(MAKE) --no-print-directory lint unit bench-check karpenter; rc=$$?; \
	  wait $$e2e; erc=$$(cat bin/e2e.rc); echo "make test: lint, unit, bench-check, karpenter exited $$rc; e2e exited $$erc"; \
	  [ $$rc -eq 0 ] && [ "$$erc" = 0 ]'
	$(MAKE) --no-print-directory image-check modzip

## lint: gofmt, go vet and staticcheck (pinned in tools/staticcheck/go.mod,
## built through the module proxy) on every module of the repository
## (test/karpenter's with go1.27.3, the Go that module needs; make e2e
## vets test/e2e).
STATICCHECK := bin/staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	for m in $(MODULES) bench bench/cluster; do (cd $$m && $(GO) vet ./...) || exit 1; done
	$(GO) build -C tools/staticcheck -o $(CURDIR)/$(STATICCHECK) honnef.co/go/tools/cmd/staticcheck
	for m in $(MODULES) bench bench/cluster tools/image test/e2e; do (cd $$m && $(CURDIR)/$(STATICCHECK) ./...) || exit 1; done
	cd test/e2e && $(CURDIR)/$(STATICCHECK) -tags rdmaguest ./rdmakernel
	GOTOOLCHAIN=go1.27.3 $(GO) build -C tools/staticcheck -o $(CURDIR)/$(STATICCHECK)-go1.27 honnef.co/go/tools/cmd/staticcheck
	cd test/karpenter && GOTOOLCHAIN=go1.27.3 $(CURDIR)/$(STATICCHECK)-go1.27 ./...

## unit: each module's packages with the race detector (fuzz seed corpora
## included), both through bin/testtimes, which fails if any failed.
unit: bin/testtimes
	bash -o pipefail -c 'for m in $(MODULES); do (cd $$m && $(GO) test -race -count=1 -json $(PKGS)); done | bin/testtimes -over $(SLOWTEST)'

## stress: the unit packages as a fresh, busy CI machine runs them: with
## the race detector, STRESSCOUNT times over (3), beside STRESSLOAD
## CPU-bound shell loops (one per CPU), so that a test that fails one run
## in twenty on a loaded machine fails here first. Run it before a
## submission.
STRESSCOUNT ?= 3
stress:
	@load=$${STRESSLOAD:-$$(nproc)}; pids=; \
	  for i in $$(seq $$load); do (while :; do :; done) & pids="$$pids $$!"; done; \
	  trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	  echo "stress: go test -race -count=$(STRESSCOUNT) beside $$load CPU-bound loops"; \
	  rc=0; for m in $(MODULES); do (cd $$m && $(GO) test -race -count=$(STRESSCOUNT) -timeout 60m $(PKGS)) || rc=1; done; exit $$rc

## bench-check: the comparison module's tests (same devices found by
## efakit, ghw and procfs), and one round of its harness.
bench-check:
	cd bench && $(GO) test -race -count=1 ./...
	cd bench && $(GO) test -run='^$$' -bench=Compare -benchtime=1x ./...

## karpenter: every instance type the fixture models build, against
## Karpenter's released tables of what dra.net and NVIDIA's DRA driver
## published on real nodes (test/karpenter, pinned to
## github.com/aws/karpenter-provider-aws v1.15.2), and the fleet table
## against the types those tables know to have EFA. v1.15.2 declares Go
## 1.26.11, so this module alone runs on go1.27.3 (GOTOOLCHAIN, fetched
## through the Go module proxy like a module); the rest keeps go.mod's Go.
## karpenter-update rewrites docs/karpenter-agreement.md.
KARPENTER_GO := GOTOOLCHAIN=go1.27.3 $(GO)
karpenter:
	cd test/karpenter && $(KARPENTER_GO) vet ./... && $(KARPENTER_GO) test -race -count=1 ./...

karpenter-update:
	cd test/karpenter && $(KARPENTER_GO) test -count=1 ./... -update

## e2e-deps: Debian's etcd-server for the e2e control plane, and runc and
## busybox-static for its real node (the Kubernetes binaries, containerd
## and the CNI plugins are built from test/e2e/k8s and test/e2e/runtime).
E2E_DEBS := etcd:etcd-server runc:runc busybox:busybox-static
e2e-deps:
	@missing=; for d in $(E2E_DEBS); do command -v $${d%%:*} >/dev/null || missing="$$missing $${d#*:}"; done; \
	  if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq $$missing; fi

## e2e: the Helm chart renders (helm from test/e2e's go.mod) into objects the
## API's types decode strictly; on a real kube-apiserver and etcd (built and
## started by the tests, on loopback) every fixture's slices pass validation
## in every group mode, the chart applies, and its admission policy refuses
## another node's slices; on a real node (kubelet, containerd, runc, in a
## mount namespace of its own) the chart's DaemonSet and the plugin run the
## users' claims into containers that print what they got. Then, after
## those, the smokes of the measurement harnesses in bench/cluster
## (TestScaleSmoke, TestPluginFleetSmoke) and the plugin's memory budget
## (TestPluginMemory). It ends with the tests and subtests that took
## SLOWTEST (30 s) or more, slowest first.
e2e: e2e-deps bin/testtimes
	cd test/e2e && $(GO) vet ./... && $(GO) vet -tags rdmaguest ./rdmakernel
	cd bench/cluster && $(GO) vet ./...
	bash -o pipefail -c '{ rc=0; for m in test/e2e bench/cluster; do (cd $$m && $(GO) test -count=1 -timeout 60m -json ./...) || rc=1; done; exit $$rc; } | bin/testtimes -over $(SLOWTEST)'

## bin/testtimes: what make unit and make e2e pipe go test -json through.
bin/testtimes: internal/testtimes/main.go
	$(GO) build -o $@ ./internal/testtimes

## SLOWTEST: make e2e lists the tests that took at least this long.
SLOWTEST ?= 30s

## rdma-kernel: efakit against a real RDMA kernel (test/e2e/rdmakernel):
## Debian 12's own kernel under qemu (KVM where the CPU has vmx or svm,
## software emulation otherwise) with soft-RoCE devices, RDMA netlink,
## uevents, containerd with CDI and runc; the VM's files come from
## Debian's packages (tools/rdma-vm/assets.sh). make e2e runs it too.
rdma-kernel: e2e-deps
	cd test/e2e && $(GO) test -count=1 -timeout 20m -run '^TestRDMAKernel$$' -v ./rdmakernel

## e2e-build: the Kubernetes commands and the node's runtime the e2e tests
## run (TestBinaries), into ~/.cache/efakit-e2e/bin; nothing when a stamp
## there says the same build made them.
e2e-build: e2e-deps
	cd test/e2e && $(GO) test -count=1 -timeout 60m -run '^TestBinaries$$' .

## burst: pod start through the real node (bench/cluster's
## TestRealNodePodStart: make e2e's TestRealNodeBursts, measured) in
## rounds (BURSTROUNDS, 6), with the plugin at client-go's default API
## client rate beside the chart's
## (BURSTRATES, QPS/burst pairs), with and without claim status writes
## (BURSTSTATUS=on,off): bursts of pods created at once on p5
## and trn2 and one pod after another, each beside the same pods without
## claims, with the percentiles and where the time went. About 25 minutes
## with every binary built.
BURSTROUNDS ?= 6
BURSTRATES ?= 5/10,50/100
BURSTSTATUS ?= on
.PHONY: burst
burst: e2e-deps
	cd bench/cluster && EFAKIT_BURST_ROUNDS=$(BURSTROUNDS) EFAKIT_BURST_RATES=$(BURSTRATES) EFAKIT_BURST_CLAIM_STATUS=$(BURSTSTATUS) $(GO) test -count=1 -timeout 90m -run '^TestRealNodePodStart$$' -v .

## scale: the fleet harness (bench/cluster/scale_test.go): the real
## kube-apiserver, kube-scheduler and kube-controller-manager with
## SCALENODES plain Node objects (a SCALEMIX of instance types), each shape
## of SCALESHAPES on a control plane of its own, SCALEROUNDS rounds
## interleaved: a burst of SCALEPODS pods, then SCALECHURN churn
## (duration@pods-per-second), with SCALESINGLES of the pods (0 to 1)
## taking one EFA instead of an accelerator with its EFAs (the pods a
## group mode cannot serve stay pending and are counted). Prints each
## size's figures and ratios and
## appends every run to bin/scale.jsonl; SCALEPPROF=dir keeps the
## scheduler's CPU profiles. SCALESCORE=0,10,50 runs every shape with each
## percentageOfNodesToScore (0: the scheduler's default), SCALERATE=default,200/400
## with each of the scheduler's client rates (QPS/burst), each a contender
## compared with the defaults. make e2e runs TestScaleSmoke: every shape
## once on 12 nodes.
SCALENODES ?= 500,2000,5000
SCALEROUNDS ?= 3
SCALEPODS ?= 500
SCALEMIX ?= p5.48xlarge=1
SCALESHAPES ?= efakit,efakit-exclusive,efakit-mixed,dranet,upstream,plain
SCALESINGLES ?= 0
SCALECHURN ?= 60s@5
SCALEPPROF ?=
SCALESCORE ?=
SCALERATE ?=
.PHONY: scale
scale: e2e-deps
	@mkdir -p bin
	cd bench/cluster && EFAKIT_SCALE_NODES=$(SCALENODES) EFAKIT_SCALE_ROUNDS=$(SCALEROUNDS) EFAKIT_SCALE_PODS=$(SCALEPODS) \
	  EFAKIT_SCALE_MIX=$(SCALEMIX) EFAKIT_SCALE_SHAPES=$(SCALESHAPES) EFAKIT_SCALE_CHURN=$(SCALECHURN) \
	  EFAKIT_SCALE_SINGLES=$(SCALESINGLES) \
	  EFAKIT_SCALE_NODES_TO_SCORE=$(SCALESCORE) EFAKIT_SCALE_SCHEDULER_RATE=$(SCALERATE) \
	  EFAKIT_SCALE_PPROF=$(if $(SCALEPPROF),$(abspath $(SCALEPPROF))) EFAKIT_SCALE_OUT=$(CURDIR)/bin/scale.jsonl \
	  $(GO) test -count=1 -timeout 900m -run '^TestScale$$' -v .

## plugin-fleet: the plugin's own API cost (bench/cluster/plugin_fleet_test.go):
## PLUGINS real efakit-plugin processes on the p5 fixture, each with a node
## name of its own, against one kube-apiserver whose audit log counts their
## requests: all start at once, PLUGINSTEADY of steady state, every slice
## deleted at once, an API server restart. PLUGINBIN measures another
## build. make e2e runs TestPluginFleetSmoke: 4 plugins.
PLUGINS ?= 50
PLUGINSTEADY ?= 3m
PLUGINBIN ?=
.PHONY: plugin-fleet
plugin-fleet: e2e-deps
	cd bench/cluster && EFAKIT_PLUGIN_FLEET=$(PLUGINS) EFAKIT_PLUGIN_FLEET_STEADY=$(PLUGINSTEADY) \
	  EFAKIT_PLUGIN_FLEET_BIN=$(if $(PLUGINBIN),$(abspath $(PLUGINBIN))) \
	  $(GO) test -count=1 -timeout 60m -run '^TestPluginFleet$$' -v .

## e2e-compat: the version matrix with Kubernetes 1.34 (test/e2e/k8s134,
## its kube-apiserver cached beside 1.37's as bin/v1.34.4): every fixture's
## slices on 1.34 and 1.37 servers, and the plugin's fallbacks on 1.34. Not
## in make test: a cold build of that kube-apiserver would take a cold CI
## run past its limit (docs/testing.md).
.PHONY: e2e-compat
e2e-compat: e2e-deps
	cd test/e2e && $(GO) vet ./... && EFAKIT_E2E_COMPAT=1 $(GO) test -count=1 -timeout 60m -run '^(TestSlicesAcrossVersions|TestPluginOn134|TestNUMAListOn137)$$' -v .

## image: the efakit-plugin OCI image for linux/amd64 and linux/arm64 (an
## image index), built without a container engine (tools/image:
## go-containerregistry; Go cross-compiles), as an OCI layout in bin/image.
image:
	cd tools/image && $(GO) run . -o ../../bin/image -version $(VERSION)

## image-check: the image index holds exactly linux/amd64 and linux/arm64,
## each runs as non-root, its binaries are static ELF files of its machine
## and run: this machine's natively, the other's under qemu-user (Debian's
## qemu-user-static, installed when missing, as e2e-deps does); the
## Dockerfile builds the same. A cold build compiles every package for both
## architectures, past go test's default 10 minutes on a busy machine.
IMAGE_QEMU = qemu-$(if $(filter arm64,$(shell $(GO) env GOARCH)),x86_64,aarch64)
image-check:
	@command -v $(IMAGE_QEMU)-static >/dev/null || command -v $(IMAGE_QEMU) >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq qemu-user-static; }
	cd tools/image && $(GO) vet ./... && $(GO) test -count=1 -timeout 30m ./...

## modzip: the committed tree packs as the module zip `go get` downloads.
modzip:
	cd plugin && $(GO) run ./internal/modzip

## fixtures: rebuild testdata/sysfs from internal/fixturegen.
fixtures:
	$(GO) run ./internal/fixturegen -o testdata/sysfs

## bench: efakit's own benchmarks, the scale benchmarks among them
## (BenchmarkScale, BenchmarkScaleCapture: p5.48xlarge 1, 10 and 100 times
## over); BENCHCOUNT runs of each, for the spread.
BENCHCOUNT ?= 5
bench:
	for m in $(MODULES); do (cd $$m && $(GO) test -run='^$$' -bench=. -benchmem -count=$(BENCHCOUNT) $(PKGS)) || exit 1; done

## bench-compare: efakit against jaypipes/ghw and prometheus/procfs on every
## fixture unpacked to disk, interleaved in COMPAREROUNDS rounds in one
## process, in CPU and wall time, with the ratios' median and range
## (bench/compare_test.go; a separate module keeps ghw and procfs out of
## go.mod). Debian's full pci.ids is installed where the machine has none,
## so ghw is also measured as users run it.
COMPAREROUNDS ?= 15
bench-compare:
	@[ -e /usr/share/misc/pci.ids ] || [ -e /usr/share/hwdata/pci.ids ] || \
	  (apt-get update -qq && apt-get install -y -qq pci.ids)
	cd bench && $(GO) test -run='^$$' -bench=Compare -benchtime=$(COMPAREROUNDS)x ./...

## fuzz: run every fuzz target for FUZZTIME each, print each one's
## executions a second (the total over the time, from go test's last
## "execs:" line), and fail if any target failed. New inputs are kept as
## found (FUZZMINIMIZETIME=1x): minimizing one of the kilobyte captures the
## pipeline targets grow takes up to go's default minute, in which nothing
## else runs. A failing input is written to the package's testdata/fuzz
## either way.
FUZZMINIMIZETIME ?= 1x
fuzz:
	@mkdir -p bin; : > bin/fuzz-rates; failed=; \
	for pkg in $$(for m in $(MODULES); do (cd $$m && $(GO) list -f '{{.Dir}}' $(PKGS)); done); do \
	  for t in $$(cd $$pkg && $(GO) test -list '^Fuzz' . | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; \
	    (cd $$pkg && $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME) .) >bin/fuzz.log 2>&1; rc=$$?; \
	    cat bin/fuzz.log; \
	    awk -v t="$$pkg $$t" '/execs: /{el=$$3; n=$$5} END{s=0; if (match(el, /[0-9]+m/)) s+=60*substr(el, RSTART, RLENGTH-1); if (match(el, /[0-9.]+s/)) s+=substr(el, RSTART, RLENGTH-1); if (s>0) printf "%-64s %9d execs in %4ds: %7d/sec\n", t, n, s, n/s; else printf "%-64s no execs: the baseline coverage of the cached corpus took the time\n", t}' bin/fuzz.log >>bin/fuzz-rates; \
	    if [ $$rc -ne 0 ] && grep -q '^    context deadline exceeded$$' bin/fuzz.log && ! grep -q 'Failing input written' bin/fuzz.log; then \
	      echo "$$pkg $$t: \"context deadline exceeded\" without a failing input is go.dev/issue/75804 (fixed in Go 1.27), not a failure" >>bin/fuzz-rates; rc=0; \
	    fi; \
	    if [ $$rc -ne 0 ]; then failed="$$failed $$pkg.$$t"; fi; \
	  done; \
	done; \
	echo "== executions a second"; cat bin/fuzz-rates; \
	if [ -n "$$failed" ]; then echo "== failed:$$failed"; exit 1; fi

build:
	$(GO) build -C plugin -ldflags "-X main.version=$(VERSION)" -o $(CURDIR)/bin/efakit ./cmd/efakit
	$(GO) build -C plugin -ldflags "-X main.version=$(VERSION)" -o $(CURDIR)/bin/efakit-plugin ./cmd/efakit-plugin

clean:
	rm -rf bin
