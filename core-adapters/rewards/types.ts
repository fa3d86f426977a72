// verl's scoring convention: compute_score(data_source, solution_str, ground_truth, extra_info)
// returns a number or a dict with 'score' plus extra metrics.

export type ScoreExtra = number | string | boolean;
/** What a scorer returns: a score, or a score with extra metrics (verl's dict form). */
export type ScoreResult = number | { score: number; [extra: string]: ScoreExtra };

/**
 * Scores one decoded response against its row's ground truth. Built-in scorers are already chosen
 * by data source and ignore `dataSource`; custom (verl-shaped) functions receive it first. A scorer
 * that runs something (code rewards run programs) returns a promise.
 */
export type Scorer = (solution: string, groundTruth: unknown, extraInfo?: Record<string, unknown>, dataSource?: string) => ScoreResult | Promise<ScoreResult>;

/** What a response was scored as: its score, whether it is correct, and the answer extracted from it. */
export interface GradedAnswer {
  score: number;
  acc: boolean;
  pred: string;
  [extra: string]: ScoreExtra;
}
