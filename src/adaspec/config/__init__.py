"""The config: its structured schemas registered in Hydra's ConfigStore (`schema`), the rules its types cannot
express (`rules`) and which of its fields make an artefact what it is (`identity`)."""
