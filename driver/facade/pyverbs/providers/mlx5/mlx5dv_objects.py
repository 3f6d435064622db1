"""pyverbs.providers.mlx5.mlx5dv_objects: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5DvPD = other_vendor("Mlx5DvPD", "MLX5")
Mlx5DvCQ = other_vendor("Mlx5DvCQ", "MLX5")
Mlx5DvQP = other_vendor("Mlx5DvQP", "MLX5")
Mlx5DvSRQ = other_vendor("Mlx5DvSRQ", "MLX5")
Mlx5DvObj = other_vendor("Mlx5DvObj", "MLX5")
