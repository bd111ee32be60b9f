"""Which hosts: inventories (patchkit's YAML, Ansible's), host patterns for `-l`, and groups
that are found at run time (Ray nodes, pods)."""
