"""Every public name of TorchOpt 0.7.3 resolves under diffopt, module by module.

The table is a recorded fact, not computed: for each public TorchOpt module, the names in its
``__all__`` (for the few modules without one, the names TorchOpt defines there itself). It was
taken from TorchOpt 0.7.3 and is kept here as data so that losing a name fails this test; torchopt
itself is never imported.
"""

import importlib

import pytest

import optree_core

# TorchOpt 0.7.3: module -> its public names.
TORCHOPT_0_7_3 = {
    "torchopt": (
        "AdaDelta AdaGrad AdaMax Adadelta Adagrad Adam AdamW Adamax FuncOptimizer MetaAdaDelta "
        "MetaAdaGrad MetaAdaMax MetaAdadelta MetaAdagrad MetaAdam MetaAdamW MetaAdamax "
        "MetaOptimizer MetaRAdam MetaRMSProp MetaRMSprop MetaSGD Optimizer RAdam RMSProp RMSprop "
        "SGD accelerated_op_available adadelta adagrad adam adamax adamw apply_updates chain "
        "clip_grad_norm extract_state_dict module_clone module_detach_ nan_to_num radam "
        "recover_state_dict register_hook rmsprop sgd stop_gradient"
    ),
    "torchopt.accelerated_op": "AdamOp adam_op is_available",
    "torchopt.accelerated_op.adam_op": "AdamOp",
    "torchopt.alias": "adadelta adagrad adam adamax adamw radam rmsprop sgd",
    "torchopt.alias.adadelta": "adadelta",
    "torchopt.alias.adagrad": "adagrad",
    "torchopt.alias.adam": "adam",
    "torchopt.alias.adamax": "adamax",
    "torchopt.alias.adamw": "adamw",
    "torchopt.alias.radam": "radam",
    "torchopt.alias.rmsprop": "rmsprop",
    "torchopt.alias.sgd": "sgd",
    "torchopt.alias.utils": "flip_sign_and_add_weight_decay scale_by_neg_lr",
    "torchopt.base": (
        "ChainedGradientTransformation EmptyState GradientTransformation UninitializedState "
        "identity"
    ),
    "torchopt.clip": "clip_grad_norm",
    "torchopt.combine": "chain chain_flat",
    "torchopt.diff": "ImplicitMetaGradientModule ZeroOrderGradientModule implicit zero_order",
    "torchopt.diff.implicit": "ImplicitMetaGradientModule custom_root",
    "torchopt.diff.implicit.decorator": "custom_root",
    "torchopt.diff.implicit.nn": "ImplicitMetaGradientModule",
    "torchopt.diff.implicit.nn.module": "ImplicitMetaGradientModule",
    "torchopt.diff.zero_order": "ZeroOrderGradientModule zero_order",
    "torchopt.diff.zero_order.nn": "ZeroOrderGradientModule",
    "torchopt.diff.zero_order.nn.module": "ZeroOrderGradientModule",
    "torchopt.distributed": (
        "TensorDimensionPartitioner auto_init_rpc barrier batch_partitioner dim_partitioner "
        "get_local_rank get_local_world_size get_rank get_worker_id get_world_info get_world_rank "
        "get_world_size is_available mean_reducer not_on_rank on_rank parallelize "
        "parallelize_async parallelize_sync rank_non_zero_only rank_zero_only remote_async_call "
        "remote_sync_call sum_reducer"
    ),
    "torchopt.distributed.api": (
        "TensorDimensionPartitioner batch_partitioner dim_partitioner mean_reducer parallelize "
        "parallelize_async parallelize_sync remote_async_call remote_sync_call sum_reducer"
    ),
    "torchopt.distributed.autograd": (
        "DistAutogradContext backward context get_gradients grad is_available"
    ),
    "torchopt.distributed.world": (
        "auto_init_rpc barrier get_local_rank get_local_world_size get_rank get_worker_id "
        "get_world_info get_world_rank get_world_size not_on_rank on_rank rank_non_zero_only "
        "rank_zero_only"
    ),
    "torchopt.hook": "nan_to_num_hook register_hook zero_nan_hook",
    "torchopt.linalg": "cg ns ns_inv",
    "torchopt.linalg.cg": "cg",
    "torchopt.linalg.ns": "ns ns_inv",
    "torchopt.linalg.utils": "cat_shapes normalize_matvec",
    "torchopt.linear_solve": "solve_cg solve_inv solve_normal_cg",
    "torchopt.linear_solve.cg": "solve_cg",
    "torchopt.linear_solve.inv": "solve_inv",
    "torchopt.linear_solve.normal_cg": "solve_normal_cg",
    "torchopt.nn": (
        "ImplicitMetaGradientModule MetaGradientModule ZeroOrderGradientModule reparameterize "
        "reparametrize swap_state"
    ),
    "torchopt.nn.stateless": "reparameterize reparametrize swap_state",
    "torchopt.optim": (
        "AdaDelta AdaGrad AdaMax Adadelta Adagrad Adam AdamW Adamax FuncOptimizer Optimizer RAdam "
        "RMSProp RMSprop SGD adadelta adagrad adam adamax adamw base func meta radam rmsprop sgd"
    ),
    "torchopt.optim.adadelta": "AdaDelta Adadelta",
    "torchopt.optim.adagrad": "AdaGrad Adagrad",
    "torchopt.optim.adam": "Adam",
    "torchopt.optim.adamax": "AdaMax Adamax",
    "torchopt.optim.adamw": "AdamW",
    "torchopt.optim.base": "Optimizer",
    "torchopt.optim.func": "FuncOptimizer base",
    "torchopt.optim.func.base": "FuncOptimizer",
    "torchopt.optim.meta": (
        "MetaAdaDelta MetaAdaGrad MetaAdaMax MetaAdadelta MetaAdagrad MetaAdam MetaAdamW "
        "MetaAdamax MetaOptimizer MetaRAdam MetaRMSProp MetaRMSprop MetaSGD adadelta adagrad adam "
        "adamax adamw base radam rmsprop sgd"
    ),
    "torchopt.optim.meta.adadelta": "MetaAdaDelta MetaAdadelta",
    "torchopt.optim.meta.adagrad": "MetaAdaGrad MetaAdagrad",
    "torchopt.optim.meta.adam": "MetaAdam",
    "torchopt.optim.meta.adamax": "MetaAdaMax MetaAdamax",
    "torchopt.optim.meta.adamw": "MetaAdamW",
    "torchopt.optim.meta.base": "MetaOptimizer",
    "torchopt.optim.meta.radam": "MetaRAdam",
    "torchopt.optim.meta.rmsprop": "MetaRMSProp MetaRMSprop",
    "torchopt.optim.meta.sgd": "MetaSGD",
    "torchopt.optim.radam": "RAdam",
    "torchopt.optim.rmsprop": "RMSProp RMSprop",
    "torchopt.optim.sgd": "SGD",
    "torchopt.pytree": (
        "AutoEntry CustomTreeNode DataclassEntry FlattenFunc FlattenedEntry GetAttrEntry "
        "GetItemEntry MAX_RECURSION_DEPTH MappingEntry NONE_IS_LEAF NONE_IS_NODE NamedTupleEntry "
        "PyTree PyTreeAccessor PyTreeDef PyTreeEntry PyTreeKind PyTreeSpec PyTreeTypeVar "
        "SequenceEntry StructSequenceEntry UnflattenFunc all_leaves broadcast_common "
        "broadcast_prefix dict_insertion_ordered is_namedtuple is_namedtuple_class "
        "is_namedtuple_instance is_structseq is_structseq_class is_structseq_instance "
        "namedtuple_fields prefix_errors register_pytree_node register_pytree_node_class "
        "structseq_fields tree_accessors tree_add tree_add_scalar_mul tree_all tree_any "
        "tree_as_rref tree_broadcast_common tree_broadcast_map tree_broadcast_map_with_accessor "
        "tree_broadcast_map_with_path tree_broadcast_prefix tree_flatten tree_flatten_as_tuple "
        "tree_flatten_one_level tree_flatten_with_accessor tree_flatten_with_path tree_is_leaf "
        "tree_iter tree_leaves tree_map tree_map_ tree_map_with_accessor tree_map_with_accessor_ "
        "tree_map_with_path tree_map_with_path_ tree_matmul tree_max tree_min tree_mul tree_neg "
        "tree_partition tree_paths tree_pos tree_reduce tree_replace_nones tree_scalar_mul "
        "tree_structure tree_sub tree_sub_scalar_mul tree_sum tree_to_here tree_transpose "
        "tree_transpose_map tree_transpose_map_with_accessor tree_transpose_map_with_path "
        "tree_truediv tree_unflatten tree_vdot_real tree_wait treespec_accessors treespec_child "
        "treespec_children treespec_defaultdict treespec_deque treespec_dict treespec_entries "
        "treespec_entry treespec_from_collection treespec_frozendict treespec_is_leaf "
        "treespec_is_one_level treespec_is_prefix treespec_is_strict_leaf treespec_is_suffix "
        "treespec_leaf treespec_list treespec_namedtuple treespec_none treespec_one_level "
        "treespec_ordereddict treespec_paths treespec_structseq treespec_transform treespec_tuple "
        "unregister_pytree_node"
    ),
    "torchopt.schedule": "exponential_decay linear_schedule polynomial_schedule",
    "torchopt.schedule.exponential_decay": "exponential_decay",
    "torchopt.schedule.polynomial": "linear_schedule polynomial_schedule",
    "torchopt.transform": (
        "add_decayed_weights masked nan_to_num scale scale_by_accelerated_adam scale_by_adadelta "
        "scale_by_adam scale_by_adamax scale_by_radam scale_by_rms scale_by_rss scale_by_schedule "
        "scale_by_stddev trace"
    ),
    "torchopt.transform.add_decayed_weights": "add_decayed_weights masked",
    "torchopt.transform.scale": "scale",
    "torchopt.transform.scale_by_adadelta": "scale_by_adadelta",
    "torchopt.transform.scale_by_adam": "scale_by_accelerated_adam scale_by_adam",
    "torchopt.transform.scale_by_adamax": "scale_by_adamax",
    "torchopt.transform.scale_by_radam": "scale_by_radam",
    "torchopt.transform.scale_by_rms": "scale_by_rms",
    "torchopt.transform.scale_by_rss": "scale_by_rss",
    "torchopt.transform.scale_by_schedule": "scale_by_schedule",
    "torchopt.transform.scale_by_stddev": "scale_by_stddev",
    "torchopt.transform.trace": "trace",
    "torchopt.transform.utils": "inc_count tree_map_flat tree_map_flat_ update_moment",
    "torchopt.typing": (
        "ChainedGradientTransformation Device Distribution EmptyState Future "
        "GradientTransformation LinearSolver ListOfOptionalTensors ListOfTensors "
        "ModuleTensorContainers Numeric OptState OptionalTensor OptionalTensorOrOptionalTensors "
        "OptionalTensorTree Params PyTree RRef Samplable SampleFunc Scalar ScalarOrSchedule "
        "Schedule SequenceOfOptionalTensors SequenceOfTensors Size Tensor TensorContainer "
        "TensorOrTensors TensorTree TupleOfOptionalTensors TupleOfTensors UninitializedState "
        "Updates"
    ),
    "torchopt.update": "apply_updates",
    "torchopt.utils": (
        "ModuleState extract_state_dict module_clone module_detach_ recover_state_dict "
        "stop_gradient"
    ),
    "torchopt.visual": "make_dot resize_graph",
}

# TorchOpt modules that diffopt lays out differently (one file per family, private helpers): the
# names are looked up in the diffopt module that holds them.
LAYOUT = {
    "torchopt.linalg.ns": "diffopt.linalg",
    "torchopt.transform.add_decayed_weights": "diffopt.transform",
    "torchopt.transform.scale_by_adadelta": "diffopt.transform",
    "torchopt.transform.scale_by_adam": "diffopt.transform",
    "torchopt.transform.scale_by_adamax": "diffopt.transform",
    "torchopt.transform.scale_by_radam": "diffopt.transform",
    "torchopt.transform.scale_by_rms": "diffopt.transform",
    "torchopt.transform.scale_by_rss": "diffopt.transform",
    "torchopt.transform.scale_by_schedule": "diffopt.transform",
    "torchopt.transform.scale_by_stddev": "diffopt.transform",
}

# Names torchopt.pytree re-exports from optree that optree_core does not provide yet; diffopt.pytree
# re-exports optree_core, so they appear there as soon as optree_core has them.
AWAITING_OPTREE_CORE = {
    "tree_broadcast_map_with_accessor",
    "tree_transpose_map_with_accessor",
    "treespec_frozendict",
}

# TorchOpt's private helpers for its own flattened-list transforms; diffopt's transforms do not
# share that design, so there is nothing for these to mirror.
NOT_MIRRORED = {
    "torchopt.transform.utils": {"inc_count", "tree_map_flat", "tree_map_flat_", "update_moment"},
}


def _cases():
    for module, names in TORCHOPT_0_7_3.items():
        target = LAYOUT.get(module, "diffopt" + module[len("torchopt"):])
        for name in names.split():
            if name in NOT_MIRRORED.get(module, ()):
                continue
            yield pytest.param(target, name, id=f"{module}.{name}")


@pytest.mark.parametrize(("module", "name"), list(_cases()))
def test_torchopt_name_resolves(module, name):
    if (module == "diffopt.pytree" and name in AWAITING_OPTREE_CORE
            and not hasattr(optree_core, name)):
        pytest.skip(f"optree_core has no {name} yet")
    assert hasattr(importlib.import_module(module), name), f"{module} has no {name}"


def test_every_module_is_importable_under_its_diffopt_name():
    missing = []
    for module in TORCHOPT_0_7_3:
        if module in LAYOUT or module in NOT_MIRRORED:
            continue
        try:
            importlib.import_module("diffopt" + module[len("torchopt"):])
        except ImportError as error:
            missing.append(f"{module}: {error}")
    assert not missing


def test_reexports_are_the_same_objects():
    import diffopt

    assert diffopt.diff.ImplicitMetaGradientModule is diffopt.nn.ImplicitMetaGradientModule
    assert diffopt.diff.ZeroOrderGradientModule is diffopt.nn.ZeroOrderGradientModule
    assert diffopt.distributed.api.dim_partitioner is diffopt.distributed.dim_partitioner
    assert diffopt.distributed.api.sum_reducer is diffopt.distributed.sum_reducer
    assert diffopt.accelerated_op.is_available is diffopt.accelerated_op_available
    assert diffopt.accelerated_op.adam_op.AdamOp is diffopt.accelerated_op.AdamOp
    assert diffopt.typing.ChainedGradientTransformation is diffopt.base.ChainedGradientTransformation
    assert diffopt.nn.reparameterize is diffopt.nn.stateless.reparametrize
