# The two commands of the README:
#   make book   builds the whole book (paper scale; SCALE=smoke for the quick version)
#   make test   runs every test (unit tests, every chapter at smoke scale, the book build with
#               warnings as errors, and the headless-Chromium check of the HTML)
# Each creates .venv with Python 3.12 and installs what it needs (make setup: the hashed lock
# requirements/lock.txt, then this package). For one chapter:
#   make chapter CH=modular_mlp [SCALE=smoke]   executes that chapter only and renders the book,
#               reusing the other chapters' notebooks from the last build at that scale
#   make lab CH=modular_mlp                     opens the chapter as a notebook in JupyterLab
#   make book EDITION=student                   the student edition (no solutions) into _build/$SCALE-student
#   make pdf                                    the whole book as one PDF too (TeX Live), into _build/$SCALE/pdf
#   make lock                                   regenerate requirements/lock.txt after changing a pin in pyproject.toml

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Python 3.12: the first interpreter that really is 3.12 (pyenv shims may exist but fail).
PYTHON ?= $(shell for p in python3.12 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12); print(sys.executable)' 2>/dev/null && break; done)
VENV := .venv
PY := $(VENV)/bin/python
SCALE ?= paper
EDITION ?= teacher
BOOK_OUT := _build/$(SCALE)$(if $(filter student,$(EDITION)),-student)
# the hashed lock of the [book,test] extras (Python 3.12; one file for Linux x86_64 and aarch64, macOS
# arm64 and Windows x64: environment markers select each platform's packages), generated from pyproject.toml
LOCK := requirements/lock.txt
# the installer of the lock, uv (from the `lock` extra of pyproject.toml), itself pinned with its hashes
UV_LOCK := requirements/uv.txt

# Data: $NTKBOOK_DATA if set, else ../shared/data when it exists (the layout used by CI).
ifeq ($(origin NTKBOOK_DATA), undefined)
  ifneq ($(wildcard ../shared/data),)
    export NTKBOOK_DATA := $(abspath ../shared/data)
  endif
endif

.PHONY: help setup data book pdf chapter lab test test-slow browser texlive clean lock

help:
	@echo "make setup             create .venv and install the pinned dependencies (hash-checked) and this package"
	@echo "make book              build the book into _build/\$$SCALE/html (SCALE=paper by default, SCALE=smoke for CI size;"
	@echo "                       EDITION=student: without the solutions, into _build/\$$SCALE-student/html)"
	@echo "make pdf               build the book as make book does, and the whole book as one PDF (XeLaTeX), linked from"
	@echo "                       every page's download menu: _build/\$$SCALE/pdf/ntkbook.pdf (installs TeX Live when root)"
	@echo "make chapter CH=name   execute one chapter (book/name.md) and render the book, reusing the others' last notebooks"
	@echo "make lab CH=name       open a chapter as a notebook in JupyterLab (installs the [notebook] extra)"
	@echo "make data              fetch and check every data file (DATA=dir, default \$$NTKBOOK_DATA or ~/.cache/ntkbook; CH=name: one chapter's)"
	@echo "make test              run all tests (unit, chapters at smoke scale, book build, browser check)"
	@echo "make test-slow         the slow checks CI runs on a sample (whole reproductions of stored results; weekly)"
	@echo "make lock              regenerate requirements/lock.txt from the pins in pyproject.toml (needs the network)"
	@echo "make clean             remove build outputs"

# Every package, with its dependencies, at the version and with the sha256 the lock names; then
# this package itself (editable, nothing more: its build backend, setuptools, is in the lock).
# uv installs the lock (hash-checked as pip does, and byte-compiled): about 30 s where pip takes 90 s.
$(VENV)/.installed: pyproject.toml $(LOCK) $(UV_LOCK)
	@test -n "$(PYTHON)" || { echo "error: Python 3.12 not found; install it or pass PYTHON=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(UV_LOCK)
	$(VENV)/bin/uv pip install --python $(PY) --quiet --compile-bytecode --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

setup: $(VENV)/.installed

# Every data file the book reads, from its canonical source, checksum-checked (README, "Data");
# files already present and correct are kept. DATA=dir fills that folder instead of $NTKBOOK_DATA
# (else ~/.cache/ntkbook); CH=name fetches only what chapter book/name.md reads.
data: setup
	$(PY) -m ntkbook.data fetch $(if $(CH),--chapter $(CH),--all) $(if $(DATA),--dest $(DATA))

book: setup
	$(PY) -m ntkbook.book.build --scale $(SCALE) --edition $(EDITION)
	@echo "open $(BOOK_OUT)/html/index.html"

# the book and, from the same executed notebooks, the whole-book PDF (rendered first: the HTML links it)
pdf: setup texlive
	$(PY) -m ntkbook.book.build --scale $(SCALE) --edition $(EDITION) --pdf
	@echo "open $(BOOK_OUT)/pdf/ntkbook.pdf (and $(BOOK_OUT)/html/index.html)"

chapter: setup
	@test -n "$(CH)" || { echo "usage: make chapter CH=name [SCALE=smoke]  (name of a file in book/, e.g. modular_mlp)" >&2; exit 2; }
	$(PY) -m ntkbook.book.build --scale $(SCALE) --edition $(EDITION) --chapter $(CH)
	@echo "open $(BOOK_OUT)/html/book/$(CH).html"

# The lock is generated, never edited: change a pin in pyproject.toml, then `make lock`. It is universal
# (--universal: markers such as sys_platform == 'win32' on the packages one platform needs), and uv keeps
# the versions the lock already has wherever the pins allow (the existing file is its preference).
lock: setup
	$(VENV)/bin/uv pip compile pyproject.toml --extra book --extra test --python-version 3.12 \
		--universal --generate-hashes --custom-compile-command "make lock" \
		--quiet --output-file $(LOCK)
	$(PY) -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["lock"][0])' \
		| $(VENV)/bin/uv pip compile - --python-version 3.12 --universal --generate-hashes \
		--custom-compile-command "make lock" --quiet --output-file $(UV_LOCK)

# JupyterLab with jupytext; .md chapters open as notebooks (settings override in the venv).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
$(VENV)/.notebook: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[book,test,notebook]"
	mkdir -p $(dir $(LAB_SETTINGS))
	echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' > $(LAB_SETTINGS)
	touch $@

lab: $(VENV)/.notebook
	$(VENV)/bin/jupyter lab $(if $(CH),book/$(CH).md,book)

# Debian's chromium for the browser check: installed when missing and we are root,
# otherwise the browser tests are skipped with the reason shown.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser check ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium is missing and cannot be installed here: the browser check will be skipped"; fi

# Debian's TeX Live for the PDF (XeLaTeX with the FreeFont fonts; latexmk runs it) and poppler's
# pdfinfo/pdfimages/pdftotext for its test: installed when missing and we are root, otherwise
# `make pdf` fails saying what is missing and the PDF test is skipped with the reason shown.
TEXLIVE_DEBS := latexmk texlive-xetex texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended \
	fonts-freefont-otf poppler-utils
texlive:
	@if command -v latexmk >/dev/null 2>&1 && command -v xelatex >/dev/null 2>&1 && command -v pdfimages >/dev/null 2>&1 \
		&& fc-list 2>/dev/null | grep -q FreeSerif; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's TeX Live for the PDF ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TEXLIVE_DEBS) >/dev/null; \
	else echo "TeX Live (latexmk, xelatex) or poppler-utils is missing and cannot be installed here: the PDF test will be skipped"; fi

# JAX's persistent compilation cache, shared by the test workers, the book builds and their kernels:
# a program compiled by one process (the same model and shapes in a test and in a chapter, or in two
# tests) is loaded by the others instead of compiled again. A loaded program is the one XLA compiled,
# so no number changes; only compilations over 0.1 s are kept.
JAX_CACHE := $(CURDIR)/.cache/jax
test: setup browser texlive
	JAX_COMPILATION_CACHE_DIR=$(JAX_CACHE) JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.1 \
		$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

# The tests marked slow (whole reproductions CI checks on a sample); the weekly reproduce.yml runs it.
test-slow: setup
	$(PY) -m pytest -q --slow -m slow

clean:
	rm -rf _build .cache _mathjax
