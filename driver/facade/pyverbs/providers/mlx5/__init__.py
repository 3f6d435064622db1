"""pyverbs.providers.mlx5: NVIDIA ConnectX direct verbs (nsnic is not an MLX5 device)."""
