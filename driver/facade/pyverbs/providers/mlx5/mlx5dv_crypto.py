"""pyverbs.providers.mlx5.mlx5dv_crypto: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5CryptoLoginAttr = other_vendor("Mlx5CryptoLoginAttr", "MLX5")
Mlx5CryptoExtLoginAttr = other_vendor("Mlx5CryptoExtLoginAttr", "MLX5")
Mlx5DEKInitAttr = other_vendor("Mlx5DEKInitAttr", "MLX5")
Mlx5DEKAttr = other_vendor("Mlx5DEKAttr", "MLX5")
Mlx5CryptoAttr = other_vendor("Mlx5CryptoAttr", "MLX5")
Mlx5DEK = other_vendor("Mlx5DEK", "MLX5")
Mlx5CryptoLogin = other_vendor("Mlx5CryptoLogin", "MLX5")
