"""The paper settings, one TOML file each; installed as ``treeqa.configs`` (``--config NAME``)."""
