"""Layer 2: the torch probes, on one `Probe` base (probes/base.py), one file per probe, and `collect`.

Probes watch a step they do not own: `NonFiniteWatch` (the first non-finite op), `StageWatch`
(each tapped value's finiteness), `GraphWatch` (graph breaks), `HostReads` (host synchronisations),
`OpRecorder` (a step's ops, optionally upcast to float32), `StepProbe` (one update's loss, grad
norm and gradient finiteness), `StepGrads` (the parameters holding a gradient when `step()` runs),
`FirstStepGrads` (the gradients at the first `step()`, and the model's train mode at each forward),
`StepCalls` (the optimizer steps taken), `StepRates` (each group's rate at each step, and what the
update did against float resolution and the gradient scale), `EmbeddingInputs` (the ids entering every embedding),
`ModuleCalls` (every module's forward calls), `GradArrivals` (the gradients reaching one autograd
node) and `NonFiniteGrads` (the parameters whose accumulated gradient is not finite). They import
records and the trace, never experiments or checks.
"""
