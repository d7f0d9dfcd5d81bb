"""Stage artefacts: where each lives (`paths`), how one is written, hashed and verified (`store`), and the rules
every command shares about them (`rules`). No Lightning: evaluation, the cache and diagnostics use it too."""
