# The README's two commands. Both install what is missing and build first.
BUILD_DIR ?= build
SPINDLE := $(BUILD_DIR)/bin/spindle

.PHONY: run test build clean

run: build
	$(SPINDLE) serve

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j 2 --timeout 600

build:
	SPINDLE_BUILD_DIR=$(BUILD_DIR) bash scripts/setup.sh

clean:
	rm -rf $(BUILD_DIR)
