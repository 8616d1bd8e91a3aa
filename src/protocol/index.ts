/**
 * What the agent server and the `effect-agent` command share with the
 * programs that talk to them: the control protocol (`Control`: the commands
 * a running session takes, as a line on the command's stdin or a
 * `POST /sessions/:id/control`), and the policy for a run's settings sent
 * from outside (`UntrustedConfig`: unknown fields and internal knobs
 * rejected, extreme values clamped into safe ranges).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as Control from "./Control.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as UntrustedConfig from "./UntrustedConfig.ts"
