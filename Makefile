# scaletrain — top-level entry points (README): `make demo` and `make test`.
# Both install missing Debian packages first (scripts/install-deps.sh), then build with CMake.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
ST          = $(BUILD)/scaletrain
DEMO        = $(BUILD)/demo
# `make demo ARCH=llama` trains the Llama variant (RMSNorm, RoPE, SwiGLU, 2 KV heads, untied head).
ARCH       ?= gpt2
DEMO_MODEL_gpt2  = --layers 4 --heads 4 --channels 256
DEMO_MODEL_llama = --arch llama --layers 4 --heads 4 --kv-heads 2 --channels 256

# A new build tree uses Ninja where it is installed (install-deps.sh installs it): it builds the
# sanitizer tree in 128 s against Make's 153 s on 2 cores (2026-11-27). A tree that exists keeps the
# generator it was configured with (CMake refuses to switch).
CMAKE_GEN   = $(if $(wildcard $(1)/CMakeCache.txt),,$(if $(shell command -v ninja 2>/dev/null),-G Ninja))

.PHONY: all deps deps-test build demo test test-release test-asan test-gpu test-cuemu bench clean

all: build

deps:
	@bash scripts/install-deps.sh

# The test suite needs more than the build: Chromium, for test_report's page checks.
deps-test:
	@bash scripts/install-deps.sh --test

build: deps
	@cmake -S . -B $(BUILD) $(call CMAKE_GEN,$(BUILD)) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# Trains a small GPT on the bundled Tiny Shakespeare for about two minutes on 2 cores: an 8192-token
# BPE learned from the corpus (it learns faster per second than bytes or GPT-2's 50257: docs/data.md),
# speeches as documents with 10% held out, validation loss printed as it falls, then a sample.
demo: build
	$(if $(DEMO_MODEL_$(ARCH)),,$(error ARCH=$(ARCH): expected gpt2 or llama))
	$(ST) tokenizer train --vocab-size 8192 --separator "" --out $(DEMO)/tok data/tinyshakespeare/input.txt
	$(ST) prepare --tokenizer $(DEMO)/tok --separator "" --val-fraction 0.1 --seq-len 128 --out $(DEMO)/data \
	  data/tinyshakespeare/input.txt
	$(ST) train --data '$(DEMO)/data/train_*.bin' --val-data '$(DEMO)/data/val_*.bin' --tokenizer $(DEMO)/tok \
	  $(DEMO_MODEL_$(ARCH)) --max-seq-len 128 --micro-batch 16 --seq-len 128 \
	  --lr 2e-3 --min-lr 2e-4 --warmup 20 --steps 400 --val-every 50 --val-batches 20 \
	  --log $(DEMO)/train.jsonl --out $(DEMO)/model
	$(ST) sample $(DEMO)/model --prompt "ROMEO:" --tokens 120 --temperature 0.8 --top-k 40

test: test-release test-asan

# Tests run JOBS at a time: the suite is ~1.3 cores busy one at a time (process start-up, mpirun and
# waits), so two at a time shorten `make test` where a VM makes system calls dear (docs/testing.md:
# 20.1 min on a Zen 5 VM, 2026-11-27; official CI 7-10% faster).
test-release: deps-test build
	cd $(BUILD) && ctest -j$(JOBS) --output-on-failure --timeout 600

# The same suite under AddressSanitizer and UBSan (a separate build tree). -g1: line tables only,
# all a sanitizer report names (file:line of every frame); 10% less build time than -g.
test-asan: deps-test
	@cmake -S . -B $(ASAN_BUILD) $(call CMAKE_GEN,$(ASAN_BUILD)) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DST_SANITIZE=ON -DST_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest -j$(JOBS) --output-on-failure --timeout 900

# The GPU suite (issue 25, docs/cuda.md): the CUDA backend's tests on the GPU. `make test` compiles
# them (so they cannot rot) but cannot run them without a GPU; this runs them, and fails, never
# skips, where there is no GPU or no CUDA build. No `deps`: the GPU machine installs nothing.
test-gpu:
	@cmake -S . -B $(BUILD) $(call CMAKE_GEN,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DST_CUDA=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	bash scripts/test-gpu.sh $(BUILD)

# The same GPU suite on the CPU emulation of CUDA (tests/cuemu; docs/cuda.md section 4): no GPU needed.
test-cuemu: build
	CUEMU=1 bash scripts/test-gpu.sh $(BUILD)

bench: build
	bash bench/bench_step.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
