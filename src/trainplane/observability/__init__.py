"""What operators watch: Prometheus metrics and structured logs."""
