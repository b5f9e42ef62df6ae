// Muon ops: schemas, argument checks and outputs of its element-wise passes (the direction, and
// the apply pass on Adafactor's apply kernel); the element math and the kernel columns are in
// math/muon.h. The Newton-Schulz orthogonalization between them is batched matrix products
// (fused_optim/ops.py).
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::MuonHyper<double> MakeMuonHyper(const char* op, double momentum, bool nesterov) {
  CheckNonNegative(op, "momentum", momentum);
  math::MuonHyper<double> h{};
  h.momentum = momentum, h.one_minus_momentum = 1.0 - momentum;
  h.nesterov = nesterov;
  h.momentum_small = math::Abs(h.one_minus_momentum) < 0.5, h.blend_small = math::Abs(momentum) < 0.5;
  return h;
}

// Muon updates matrices only: its orthogonalization and learning-rate adjustment need two
// dimensions (the direction pass is element-wise and takes any shape, a vmap batch included).
void CheckMatrices(const char* op, const char* name, TensorListArg list) {
  for (size_t i = 0; i < list.size(); ++i) {
    FUSED_OPTIM_CHECK_VALUE(list[i].dim() == 2, op, ": Muon updates matrices only, but ", name, "[", i, "] has ",
                            list[i].dim(), " dimensions (shape ", list[i].sizes(), ")");
  }
}

void MuonDirectionInPlace(TensorListArg grads, TensorListArg momentum_buffers, TensorListArg directions,
                          double momentum, bool nesterov) {
  constexpr const char* op = "fused_optim::muon_direction_";
  const auto hyper = MakeMuonHyper(op, momentum, nesterov);
  MultiTensorCall call(op, grads, kInPlace);
  call.AddInput("grads", grads);
  call.AddMutable("momentum_buffers", momentum_buffers);
  call.AddMutable("directions", directions);
  if (call.ChecksOnly()) return;  // nothing is written yet
  call.Launch(FUSED_OPTIM_KERNEL(MuonDirection), hyper);
}

Lists<2> MuonDirectionUpdate(TensorListArg grads, TensorListArg momentum_buffers, double momentum, bool nesterov) {
  constexpr const char* op = "fused_optim::muon_direction";
  const auto hyper = MakeMuonHyper(op, momentum, nesterov);
  MultiTensorCall call(op, grads);
  call.AddInput("grads", grads);
  TensorVector new_buffers = call.AddOutputFrom("momentum_buffers", momentum_buffers);
  TensorVector directions = call.AddOutput();
  call.Launch(FUSED_OPTIM_KERNEL(MuonDirection), hyper);
  return {std::move(directions), std::move(new_buffers)};
}

Lists<2> MuonDirectionBackward(const OptionalTensorList& grad_directions,
                               const OptionalTensorList& grad_new_momentum_buffers, TensorListArg grads,
                               double momentum, bool nesterov) {
  constexpr const char* op = "fused_optim::muon_direction_backward";
  // grads only give the shapes: the direction is linear, its gradients do not depend on values
  return UpdateBackward<2>(
      op, FUSED_OPTIM_KERNEL(MuonDirectionBackward), MakeMuonHyper(op, momentum, nesterov), grads,
      {{"grad_directions", grad_directions}, {"grad_new_momentum_buffers", grad_new_momentum_buffers}}, {});
}

// p <- p (1 - lr wd) - lr scale u, Adafactor's apply pass with the step size rho = lr scale alone
// (one call per shape: `scale` is the shape's learning-rate adjustment): its norms given as 0, so
// that eps2 = 1 holds max(eps2, RMS(p)) and 1 holds max(1, RMS(u) / d), the coefficient is -rho.
void MuonApplyInPlace(TensorListArg params, TensorListArg updates, double lr, double weight_decay,
                      double update_scale) {
  constexpr const char* op = "fused_optim::muon_apply_";
  CheckNonNegative(op, {{"learning rate", lr}, {"weight_decay", weight_decay}, {"update_scale", update_scale}});
  CheckMatrices(op, "params", params);
  MultiTensorCall call(op, params, kInPlace);
  call.AddMutable("params", params);
  call.AddInput("updates", updates);
  if (call.ChecksOnly()) return;  // nothing is written yet
  math::AdafactorHyper<double> hyper{};
  hyper.decay = 1.0 - lr * weight_decay, hyper.has_decay = weight_decay != 0.0;
  const double rho = lr * update_scale;
  call.SetTensorScalars(adafactor_cols::kNumScalars, [rho](int64_t /*t*/, double* row) {
    using namespace adafactor_cols;
    row[kRho] = rho, row[kRootNumel] = 1.0, row[kEps2] = 1.0, row[kClip] = 1.0;
  });
  call.SetStateValues({0.0, 0.0});  // RMS(p) and RMS(u), below eps2 and the clipping threshold
  call.Launch(FUSED_OPTIM_KERNEL(AdafactorApply), hyper);
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(muon, op) {
  op.Add<&MuonDirectionInPlace>("muon_direction_(Tensor[] grads, Tensor(a!)[] momentum_buffers, Tensor(b!)[] directions, *, float momentum, "
     "bool nesterov) -> ()");
  op.Add<&MuonDirectionUpdate>("muon_direction(Tensor[] grads, Tensor[] momentum_buffers, *, float momentum, bool nesterov) "
     "-> (Tensor[], Tensor[])");
  op.Add<&MuonDirectionBackward>("muon_direction_backward(Tensor?[] grad_directions, Tensor?[] grad_new_momentum_buffers, Tensor[] grads, *, "
     "float momentum, bool nesterov) -> (Tensor[], Tensor[])");
  op.Add<&MuonApplyInPlace>("muon_apply_(Tensor(a!)[] params, Tensor[] updates, *, float lr, float weight_decay, float update_scale) -> ()");
}
// clang-format on

}  // namespace fused_optim
