"""Importers from other frameworks' exported programs (torch.export needs the torch extra)."""
