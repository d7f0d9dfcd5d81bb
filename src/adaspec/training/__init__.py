"""Training a stage: what each stage is (`stage_specs`), running one in order (`pipeline`), its Lightning Trainer
(`trainer`), the process's rank in a data-parallel run (`distributed`) and a CSV log that survives a resume
(`resumable_csv`)."""
