"""The app window and its menus: the views placed from the registry, wired to the state and the worker."""
