# Two commands from a fresh clone: `make run` and `make test`. Each makes .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
export PORT

.PHONY: run test lint worker install

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	@mkdir -p var staticfiles
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py migrate --no-input
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py import_docs
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py sync_catalogue
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py sync_templates
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py demo
	DEBUG=$${DEBUG:-1} $(BIN)/gunicorn -c config/gunicorn.conf.py config.wsgi

test: $(VENV)/.installed
	@mkdir -p var
	SECRET_KEY=$${SECRET_KEY:-test-only-not-secret} ATRIUM_VAULT_KEYS=$${ATRIUM_VAULT_KEYS:-dGVzdC1vbmx5LXZhdWx0LWtleS1ub3Qtc2VjcmV0ISE=} $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(BIN)/ruff check .

worker: $(VENV)/.installed
	$(BIN)/celery -A config worker --beat --loglevel INFO
