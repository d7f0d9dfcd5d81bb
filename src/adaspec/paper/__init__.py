"""The paper comparison (experiments/README.md): AdaSPEC against DistillSpec, run by `make paper`."""
