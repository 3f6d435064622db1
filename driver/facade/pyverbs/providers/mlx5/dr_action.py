"""pyverbs.providers.mlx5.dr_action: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

DrAction = other_vendor("DrAction", "MLX5")
DrActionQp = other_vendor("DrActionQp", "MLX5")
DrActionFlowCounter = other_vendor("DrActionFlowCounter", "MLX5")
DrActionDrop = other_vendor("DrActionDrop", "MLX5")
DrActionModify = other_vendor("DrActionModify", "MLX5")
DrActionTag = other_vendor("DrActionTag", "MLX5")
DrActionDestTable = other_vendor("DrActionDestTable", "MLX5")
DrActionPopVLan = other_vendor("DrActionPopVLan", "MLX5")
DrActionPushVLan = other_vendor("DrActionPushVLan", "MLX5")
DrActionDestAttr = other_vendor("DrActionDestAttr", "MLX5")
DrActionDestArray = other_vendor("DrActionDestArray", "MLX5")
DrActionDefMiss = other_vendor("DrActionDefMiss", "MLX5")
DrActionVPort = other_vendor("DrActionVPort", "MLX5")
DrActionIBPort = other_vendor("DrActionIBPort", "MLX5")
DrActionDestTir = other_vendor("DrActionDestTir", "MLX5")
DrActionPacketReformat = other_vendor("DrActionPacketReformat", "MLX5")
DrFlowSamplerAttr = other_vendor("DrFlowSamplerAttr", "MLX5")
DrActionFlowSample = other_vendor("DrActionFlowSample", "MLX5")
DrFlowMeterAttr = other_vendor("DrFlowMeterAttr", "MLX5")
DrActionFlowMeter = other_vendor("DrActionFlowMeter", "MLX5")
