// SGD ops: argument checks and outputs; the element math and the kernel columns are in math/sgd.h.
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::SgdHyper<double> MakeSgdHyper(const char* op, double lr, double momentum, double dampening, double weight_decay,
                                    bool nesterov, bool maximize, bool first_step) {
  CheckNonNegative(op, {{"learning rate", lr}, {"momentum", momentum}, {"weight_decay", weight_decay}});
  FUSED_OPTIM_CHECK_VALUE(!nesterov || (momentum > 0.0 && dampening == 0.0), op,
                          ": Nesterov momentum requires a momentum and zero dampening");
  math::SgdHyper<double> h{};
  h.lr = lr, h.momentum = momentum, h.dampening = dampening, h.weight_decay = weight_decay;
  h.one_minus_dampening = 1.0 - dampening;
  h.nesterov = nesterov, h.maximize = maximize;
  h.has_l2 = weight_decay != 0.0;
  h.has_momentum = momentum != 0.0;
  h.first_step = first_step;
  return h;
}

void SgdStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg momentum_buffers, double lr,
                    double momentum, double dampening, double weight_decay, bool nesterov, bool maximize,
                    bool first_step, const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
  constexpr const char* op = "fused_optim::sgd_step_";
  const auto hyper = MakeSgdHyper(op, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step);
  // On the first step the buffers are overwritten (they start as the gradient).
  StepInPlace(op, FUSED_OPTIM_KERNEL(SgdStep), hyper, params, grads,
              {{"momentum_buffers", momentum_buffers, hyper.has_momentum, kNoMomentum}}, {grad_scale, found_inf});
}

Lists<2> SgdUpdate(TensorListArg params, TensorListArg grads, TensorListArg momentum_buffers, double lr,
                   double momentum, double dampening, double weight_decay, bool nesterov, bool maximize,
                   bool first_step) {
  constexpr const char* op = "fused_optim::sgd_update";
  const auto hyper = MakeSgdHyper(op, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddState("params", params);
  call.AddInput("grads", grads);
  TensorVector new_buffers;
  if (hyper.has_momentum && first_step) {  // the buffers start as the gradient: no input
    FUSED_OPTIM_CHECK_VALUE(momentum_buffers.empty(), op,
                            ": momentum_buffers must be empty on the first step (the buffers start as the gradient)");
    new_buffers = call.AddOutput();
  } else {
    new_buffers = call.AddStateIf(hyper.has_momentum, "momentum_buffers", momentum_buffers, kNoMomentum);
  }
  call.Launch(FUSED_OPTIM_KERNEL(SgdStep), hyper);
  return {std::move(new_params), std::move(new_buffers)};
}

Lists<3> SgdUpdateBackward(const OptionalTensorList& grad_new_params,
                           const OptionalTensorList& grad_new_momentum_buffers, TensorListArg params, double lr,
                           double momentum, double dampening, double weight_decay, bool nesterov, bool maximize,
                           bool first_step) {
  constexpr const char* op = "fused_optim::sgd_update_backward";
  const auto hyper = MakeSgdHyper(op, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step);
  return UpdateBackward<3>(op, FUSED_OPTIM_KERNEL(SgdBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_momentum_buffers", grad_new_momentum_buffers, hyper.has_momentum}},
                           {}, {true, true, hyper.has_momentum && !first_step});
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(sgd, op) {
  op.Add<&SgdStepInPlace>("sgd_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] momentum_buffers, *, float lr, float momentum, "
     "float dampening, float weight_decay, bool nesterov, bool maximize, bool first_step, "
     FUSED_OPTIM_AMP_ARGS ") -> ()");
  op.Add<&SgdUpdate>("sgd_update(Tensor[] params, Tensor[] grads, Tensor[] momentum_buffers, *, float lr, float momentum, "
     "float dampening, float weight_decay, bool nesterov, bool maximize, bool first_step) -> (Tensor[], Tensor[])");
  op.Add<&SgdUpdateBackward>("sgd_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_momentum_buffers, Tensor[] params, *, "
     "float lr, float momentum, float dampening, float weight_decay, bool nesterov, bool maximize, "
     "bool first_step) -> (Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
