"""pyverbs.providers.mlx5.dr_table: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

DrTable = other_vendor("DrTable", "MLX5")
