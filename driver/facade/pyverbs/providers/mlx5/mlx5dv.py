"""pyverbs.providers.mlx5.mlx5dv: MLX5 direct verbs. nsnic is not an MLX5 device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

Mlx5DVPortAttr = other_vendor("Mlx5DVPortAttr", "MLX5")
Mlx5DVContextAttr = other_vendor("Mlx5DVContextAttr", "MLX5")
Mlx5DevxObj = other_vendor("Mlx5DevxObj", "MLX5")
Mlx5Context = other_vendor("Mlx5Context", "MLX5")
Mlx5DVContext = other_vendor("Mlx5DVContext", "MLX5")
Mlx5DCIStreamInitAttr = other_vendor("Mlx5DCIStreamInitAttr", "MLX5")
Mlx5DVDCInitAttr = other_vendor("Mlx5DVDCInitAttr", "MLX5")
Mlx5DVQPInitAttr = other_vendor("Mlx5DVQPInitAttr", "MLX5")
Mlx5QP = other_vendor("Mlx5QP", "MLX5")
Mlx5DVCQInitAttr = other_vendor("Mlx5DVCQInitAttr", "MLX5")
Mlx5CQ = other_vendor("Mlx5CQ", "MLX5")
Mlx5VAR = other_vendor("Mlx5VAR", "MLX5")
Mlx5PP = other_vendor("Mlx5PP", "MLX5")
Mlx5UAR = other_vendor("Mlx5UAR", "MLX5")
Mlx5DmOpAddr = other_vendor("Mlx5DmOpAddr", "MLX5")
WqeSeg = other_vendor("WqeSeg", "MLX5")
WqeCtrlSeg = other_vendor("WqeCtrlSeg", "MLX5")
WqeDataSeg = other_vendor("WqeDataSeg", "MLX5")
Wqe = other_vendor("Wqe", "MLX5")
Mlx5UMEM = other_vendor("Mlx5UMEM", "MLX5")
Mlx5Cqe64 = other_vendor("Mlx5Cqe64", "MLX5")
Mlx5DevxMsiVector = other_vendor("Mlx5DevxMsiVector", "MLX5")
Mlx5DevxEq = other_vendor("Mlx5DevxEq", "MLX5")
Mlx5DevxCmdComp = other_vendor("Mlx5DevxCmdComp", "MLX5")


def _flags_to_str(flags: int) -> str:
    return f"0x{flags:x}"

context_flags_to_str = context_comp_mask_to_str = cqe_comp_to_str = qpts_to_str = _flags_to_str
tunnel_offloads_to_str = dc_type_to_str = qp_comp_mask_to_str = _flags_to_str
qp_create_flags_to_str = send_ops_flags_to_str = swp_to_str = _flags_to_str
