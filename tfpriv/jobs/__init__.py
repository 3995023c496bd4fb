"""What a model family plugs into: the job contract (`job`: settings, flags, the `Family` record and
its registry), the shared flags (`flags`), the one run sequence (`pipeline`), the tuning defaults
(`tuning`) and the SavedModel writer (`serving`)."""
