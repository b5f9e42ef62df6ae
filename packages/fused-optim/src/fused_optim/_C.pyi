# The compiled module only loads the ops (torch.ops.fused_optim.*) and carries build metadata.
BUILD_INFO: dict[str, str | int | bool]
