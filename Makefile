# holdfast — make targets. `make demo` is the first command on a fresh machine, `make test` the second.
GO      ?= go
BIN     := bin/holdfast
PKGS    := ./...
MODULE  := github.com/holdfast-backup/holdfast
HOLDFAST_VERSION ?= 0.1.0
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Without -trimpath the checkout's directory is part of every package's build cache key, so each
# fresh clone compiled and vetted every package again (about 60 s of CPU in `make test`).
export GOFLAGS += -trimpath
# holdfast-unit, which every run's unit executes twice (exec, then marker), is built without cgo:
# without libc to load it starts in about 3 ms instead of 6-8 here. It resolves no name, and its
# one user lookup names a file's owner in a refusal (a user only NSS knows shows as its uid).
# holdfast itself keeps cgo: the users of jobs are looked up through NSS (LDAP, sssd).
UNIT_GO := CGO_ENABLED=0 $(GO)

.PHONY: all build deps test test-hosts test-restic test-pgbouncer lint bench bench-fleet demo fuzz man package clean

all: build

deps:
	@scripts/install-deps

build:
	$(GO) build -ldflags "-X main.version=$(HOLDFAST_VERSION)" -o $(BIN) ./cmd/holdfast
	$(UNIT_GO) build -o $(dir $(BIN))holdfast-unit ./cmd/holdfast-unit

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed on:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# The suite against a real PostgreSQL, real systemd managers and real restic (testenv starts
# private ones), as plain go test: `go test ./reconcile -run X -v` runs a part of it the same way.
# The lint is a step of its own (make lint, which CI runs first); go vet's full set of checks is
# there, so the suite turns off go test's subset of them (-vet=off), which analysed every
# dependency again in each build (a cold build cache: 305 -> 264 CPU-s to build the suite).
# CI=true turns a missing dependency into a failure instead of a skip. Every package runs with the
# race detector but the scenarios (SCENARIOS), whose daemons and units are the holdfast binary,
# built once without it where units running as nobody can reach it (testenv.BinaryEnv; go run
# keeps the executable it links in the build cache, go build would link it every time). The
# scenarios run beside the packages: they mostly wait on systemd and restic, so six run at once
# even on two cores. What only a whole system shows (BOOTED_TESTS: the packages, systemd as PID 1,
# reboots, the README's install and its first backup of gigabytes) is make test-hosts.
# Test binaries are linked at every run; without DWARF (-w) a link takes a third less CPU, and a
# failing test's stack trace or a race report still names files and lines (the symbol table's).
test test-hosts test-restic: export GOFLAGS += -ldflags=-w -vet=off
SCENARIOS := ./cmd/holdfast/
BOOTED_TESTS := ^(TestBooted.*|TestRPMPackage)$$
# The scenarios whose outcome depends on restic's release (its output, exit codes, signals,
# forget rules: those that stop, restart, fail, restore, verify, copy, prune and look inside
# snapshots) run in make test-restic, against each release operators run, Debian 12's 0.14.0
# among them; make test runs the rest, so that it stays within its minutes on two cores.
RESTIC_SCENARIO_NAMES := TestBackupSucceeds|TestSnapshotBrowseAndFind|TestBackupPartialAsUser|TestBackupFailsPermanently|TestBadInputRefused|TestStopRunningBackup|TestGracefulReboot|TestStopVersusReboot|TestStopThenGracefulExit|TestRuntimeLimit|TestStreamedDumps|TestRestoreEqualsSource|TestRestoreToOriginal|TestRestoreToOriginalAfterCrash|TestRestoreAfterCrash|TestVerify|TestDrill|TestCopyTo|TestRetentionApply|TestApplyPlanAndPrune|TestLedgerDeferral|TestFirstBackupSizedFromItsPaths|TestRetries|TestHardCrash|TestMetrics|TestAppendOnly|TestRecoverDatabase
RESTIC_SCENARIOS := ^($(RESTIC_SCENARIO_NAMES))$$
# The packages whose tests take longest (each a minute or more on a loaded machine) are started
# first, so that none of them is the last to start; the rest follow in go list's order. The order
# only costs or saves time (a package moved or renamed must be here too: go test refuses a path
# that does not exist).
SLOW_PACKAGES := cmd/holdfast-demo store supervisor journallog reconcile retention engine notify
test: deps
	@bindir=$$(mktemp -d) && chmod 755 $$bindir && $(GO) run -exec cp ./cmd/holdfast $$bindir/holdfast \
		&& $(UNIT_GO) run -exec cp ./cmd/holdfast-unit $$bindir/holdfast-unit && chmod 755 $$bindir/* || exit 1; \
	export HOLDFAST_TEST_BINARY=$$bindir/holdfast; \
	$(GO) test -count=1 -timeout 30m -parallel 6 -skip '^(TestBooted.*|TestRPMPackage|$(RESTIC_SCENARIO_NAMES))$$' $(SCENARIOS) & scenarios=$$!; \
	$(GO) test -race -count=1 -timeout 30m -parallel 4 -p 4 -skip '$(BOOTED_TESTS)' $(addprefix $(MODULE)/,$(SLOW_PACKAGES)) \
		$$($(GO) list $(PKGS) | grep -vxF -e $(MODULE)/$(SCENARIOS:./%/=%) $(addprefix -e $(MODULE)/,$(SLOW_PACKAGES))); \
	packages=$$?; wait $$scenarios; scenarios=$$?; \
	rm -rf $$bindir; \
	[ $$packages -eq 0 ] && [ $$scenarios -eq 0 ]

# The booted hosts: the .deb and .rpm, holdfast installed as the README says on a Debian 12 host
# whose PID 1 is systemd (credentials, the system journal, the watchdog, reboots and power losses,
# the hostile user's links, the first backup of a home of gigabytes and its restore), testenv's own
# booted hosts, and then the package and reboot tests on Debian 13 hosts (systemd 257, their own
# restic 0.18 and PostgreSQL 17). Each host is a container booted from a cached image (testenv.BootedHost).
DEBIAN13_TESTS := ^(TestBootedHostPackage|TestBootedHostReboot)$$
test-hosts: deps
	@bindir=$$(mktemp -d) && chmod 755 $$bindir && $(GO) run -exec cp ./cmd/holdfast $$bindir/holdfast \
		&& $(UNIT_GO) run -exec cp ./cmd/holdfast-unit $$bindir/holdfast-unit && chmod 755 $$bindir/* || exit 1; \
	export HOLDFAST_TEST_BINARY=$$bindir/holdfast; failed=; \
	start=$$(date +%s); echo "== booted Debian 12 hosts"; \
	$(GO) test -count=1 -timeout 30m -parallel 6 -run '$(BOOTED_TESTS)' $(SCENARIOS) & scenarios=$$!; \
	$(GO) test -race -count=1 -timeout 30m -run '$(BOOTED_TESTS)' ./testenv/ || failed="$$failed testenv"; \
	wait $$scenarios || failed="$$failed debian-12"; \
	echo "== booted Debian 12 hosts: $$(( $$(date +%s) - start )) s"; \
	start=$$(date +%s); echo "== booted Debian 13 hosts"; \
	HOLDFAST_TEST_DEBIAN=13 $(GO) test -count=1 -timeout 30m -run '$(DEBIAN13_TESTS)' $(SCENARIOS) \
		|| failed="$$failed debian-13"; \
	echo "== booted Debian 13 hosts: $$(( $$(date +%s) - start )) s"; \
	rm -rf $$bindir; \
	[ -z "$$failed" ] || { echo "test-hosts: failed:$$failed"; exit 1; }

# The restic matrix: what depends on restic (its output, exit codes, signals, forget rules:
# engine, retention, a root restore's sandbox losses (spawn) and RESTIC_SCENARIOS) against Debian
# 12's 0.14.0, Ubuntu 24.04's 0.16.4, Debian 13's 0.18.1 and upstream's 0.19.1, each built once by
# scripts/install-restic and named by HOLDFAST_TEST_RESTIC, never the one that happens to be
# installed. make test runs those packages with the installed restic too, and the rest of the
# scenarios. The whole suite four times would not fit CI's time.
RESTIC_VERSIONS  ?= 0.14.0 0.16.4 0.18.1 0.19.1
RESTIC_PACKAGES  := ./engine/ ./retention/ ./forget/ ./inventory/ ./reconcile/ ./spawn/ ./catalog/
test-restic: deps
	@bindir=$$(mktemp -d) && chmod 755 $$bindir && $(GO) build -o $$bindir/holdfast ./cmd/holdfast \
		&& $(UNIT_GO) build -o $$bindir/holdfast-unit ./cmd/holdfast-unit && chmod 755 $$bindir/* || exit 1; \
	failed=; for v in $(RESTIC_VERSIONS); do \
		start=$$(date +%s); echo "== restic $$v"; \
		if ! bin=$$(scripts/install-restic $$v); then failed="$$failed restic-$$v(install)"; continue; fi; \
		HOLDFAST_TEST_RESTIC=$$bin HOLDFAST_TEST_BINARY=$$bindir/holdfast $(GO) test -count=1 -timeout 20m -parallel 4 $(RESTIC_PACKAGES) \
			|| failed="$$failed restic-$$v(packages)"; \
		HOLDFAST_TEST_RESTIC=$$bin HOLDFAST_TEST_BINARY=$$bindir/holdfast $(GO) test -count=1 -timeout 20m -parallel 6 -run '$(RESTIC_SCENARIOS)' $(SCENARIOS) \
			|| failed="$$failed restic-$$v(scenarios)"; \
		echo "== restic $$v: $$(( $$(date +%s) - start )) s"; \
	done; \
	rm -rf $$bindir; \
	[ -z "$$failed" ] || { echo "test-restic: failed:$$failed"; exit 1; }

# The suite with every test's store and daemon behind a private PgBouncer in transaction mode,
# the database itself their session address (testenv.Pooled; docs/ARCHITECTURE.md, Behind PgBouncer).
test-pgbouncer: export HOLDFAST_TEST_PGBOUNCER = 1
test-pgbouncer: test

# Figures are ratios against a baseline measured in the same run (see bench/).
bench: deps
	$(GO) test -run '^$$' -bench '^BenchmarkStartLatency$$' -benchtime 20x -count 1 ./bench/
	$(GO) test -run '^$$' -bench '^BenchmarkStopLatency$$' -benchtime 6x -count 1 ./bench/
	$(GO) test -run '^$$' -bench '^Benchmark(Sweep|BootPass|Lateness|StartBusy|RetentionPlan|RepoSize)$$' -benchtime 1x -count 1 ./bench/
	$(GO) test -run '^$$' -bench '^Benchmark(BackupSmall|BackupLarge|Idle)$$' -benchtime 1x -count 1 -timeout 30m ./bench/
	$(GO) test -run '^$$' -bench '^BenchmarkSnapshotLs$$' -benchtime 1x -count 1 -timeout 30m ./bench/

# One real idle daemon's database time beside fleets of 10, 100 and 1,000 hosts (pg_stat_statements
# by its role), its connections and the growth; then 100, 300 and 1,000 simulated daemons (the
# daemon's loops over the real store, systemd faked) with their database time per daemon, lease
# renewal and sweep p99, lapsed leases and growth, calibrated against a real daemon's statements.
# HOLDFAST_FLEET_WINDOW sets each measurement (30s).
bench-fleet: deps
	$(GO) test -run '^$$' -bench '^BenchmarkFleet(IdleDaemon|Simulated|Scrape)$$' -benchtime 1x -count 1 -timeout 60m ./bench/

# Runs each fuzz target for FUZZTIME (default 30s); the seed corpora run in `make test`. No test
# timeout: go test's default of 10m would end a 10m fuzzing run as a failure.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseLine$$' -fuzztime $(FUZZTIME) -timeout 0 ./journal/
	$(GO) test -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) -timeout 0 ./journal/
	$(GO) test -run '^$$' -fuzz '^FuzzParseMarker$$' -fuzztime $(FUZZTIME) -timeout 0 ./systemd/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) -timeout 0 ./retention/
	$(GO) test -run '^$$' -fuzz '^FuzzNew$$' -fuzztime $(FUZZTIME) -timeout 0 ./retention/
	$(GO) test -run '^$$' -fuzz '^FuzzParseResticSnapshots$$' -fuzztime $(FUZZTIME) -timeout 0 ./retention/
	$(GO) test -run '^$$' -fuzz '^FuzzSampleFiles$$' -fuzztime $(FUZZTIME) -timeout 0 ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzValidateReadDataSubset$$' -fuzztime $(FUZZTIME) -timeout 0 ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzParseLs$$' -fuzztime $(FUZZTIME) -timeout 0 ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzParseFind$$' -fuzztime $(FUZZTIME) -timeout 0 ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSnapshots$$' -fuzztime $(FUZZTIME) -timeout 0 ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzAddressLibpqParams$$' -fuzztime $(FUZZTIME) -timeout 0 ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) -timeout 0 ./cmd/holdfast/
	$(GO) test -run '^$$' -fuzz '^FuzzSplit$$' -fuzztime $(FUZZTIME) -timeout 0 ./hook/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSize$$' -fuzztime $(FUZZTIME) -timeout 0 ./ledger/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEnv$$' -fuzztime $(FUZZTIME) -timeout 0 ./credentials/
	$(GO) test -run '^$$' -fuzz '^FuzzEncrypted$$' -fuzztime $(FUZZTIME) -timeout 0 ./credentials/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -timeout 0 ./schedule/
	$(GO) test -run '^$$' -fuzz '^FuzzResticprofile$$' -fuzztime $(FUZZTIME) -timeout 0 ./importer/
	$(GO) test -run '^$$' -fuzz '^FuzzCronOf$$' -fuzztime $(FUZZTIME) -timeout 0 ./importer/
	$(GO) test -run '^$$' -fuzz '^FuzzAutorestic$$' -fuzztime $(FUZZTIME) -timeout 0 ./importer/
	$(GO) test -run '^$$' -fuzz '^FuzzBackrest$$' -fuzztime $(FUZZTIME) -timeout 0 ./importer/

# Man pages come from the CLI's own help; a clean environment keeps local settings out of them.
man: build
	env -i PATH="$$PATH" $(BIN) man man/

# The .deb and .rpm in dist/ (packaging/build: nfpm, with the binary built as HOLDFAST_VERSION).
package:
	packaging/build $(HOLDFAST_VERSION) dist

# DEMOFLAGS go to holdfast-demo, e.g. DEMOFLAGS="--sample-size 20" or DEMOFLAGS=--keep.
DEMOFLAGS ?=
demo: deps build
	@scripts/demo $(DEMOFLAGS)

clean:
	rm -rf bin dist man
