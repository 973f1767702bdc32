# mypy: ignore-errors
