"""pyverbs.providers.mlx5.mlx5dv_mkey: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5SigCrc = other_vendor("Mlx5SigCrc", "MLX5")
Mlx5SigT10Dif = other_vendor("Mlx5SigT10Dif", "MLX5")
Mlx5SigBlockDomain = other_vendor("Mlx5SigBlockDomain", "MLX5")
Mlx5SigBlockAttr = other_vendor("Mlx5SigBlockAttr", "MLX5")
Mlx5SigErr = other_vendor("Mlx5SigErr", "MLX5")
Mlx5MkeyErr = other_vendor("Mlx5MkeyErr", "MLX5")
Mlx5MkeyConfAttr = other_vendor("Mlx5MkeyConfAttr", "MLX5")
Mlx5MrInterleaved = other_vendor("Mlx5MrInterleaved", "MLX5")
Mlx5Mkey = other_vendor("Mlx5Mkey", "MLX5")
