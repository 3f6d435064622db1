"""pyverbs.providers.mlx5.mlx5_vfio: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5VfioAttr = other_vendor("Mlx5VfioAttr", "MLX5")
Mlx5VfioContext = other_vendor("Mlx5VfioContext", "MLX5")
