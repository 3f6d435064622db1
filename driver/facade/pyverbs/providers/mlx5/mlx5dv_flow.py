"""pyverbs.providers.mlx5.mlx5dv_flow: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5FlowMatchParameters = other_vendor("Mlx5FlowMatchParameters", "MLX5")
Mlx5FlowMatcherAttr = other_vendor("Mlx5FlowMatcherAttr", "MLX5")
Mlx5FlowMatcher = other_vendor("Mlx5FlowMatcher", "MLX5")
Mlx5PacketReformatFlowAction = other_vendor("Mlx5PacketReformatFlowAction", "MLX5")
Mlx5ModifyFlowAction = other_vendor("Mlx5ModifyFlowAction", "MLX5")
Mlx5FlowActionAttr = other_vendor("Mlx5FlowActionAttr", "MLX5")
Mlx5Flow = other_vendor("Mlx5Flow", "MLX5")
