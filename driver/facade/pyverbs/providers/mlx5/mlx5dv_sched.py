"""pyverbs.providers.mlx5.mlx5dv_sched: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5dvSchedAttr = other_vendor("Mlx5dvSchedAttr", "MLX5")
Mlx5dvSchedNode = other_vendor("Mlx5dvSchedNode", "MLX5")
Mlx5dvSchedLeaf = other_vendor("Mlx5dvSchedLeaf", "MLX5")
