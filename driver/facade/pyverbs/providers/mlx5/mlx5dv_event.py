"""pyverbs.providers.mlx5.mlx5dv_event: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

EventChannel = other_vendor("EventChannel", "MLX5")
EventHeader = other_vendor("EventHeader", "MLX5")
EventFD = other_vendor("EventFD", "MLX5")
