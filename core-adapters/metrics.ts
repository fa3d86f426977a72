// The metrics record every role reports, at the bottom of the layers: the model's update loop
// builds one before any role exists.

/** Numbers (and the odd label) reported for one step; keys are verl-style `section/name`. */
export type Metrics = Record<string, number>;
