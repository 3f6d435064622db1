"""pyverbs.providers.mlx5.dr_matcher: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

DrMatcher = other_vendor("DrMatcher", "MLX5")
