package dev.rtlab;

/**
 * A {@link RobustMutex} whose owner died was unlocked without {@link RobustMutex#makeConsistent()}:
 * it cannot be used any more.
 */
public final class NotRecoverableException extends RtlabException {
    private static final long serialVersionUID = 1L;

    NotRecoverableException(String message) {
        super(message, Native.ENOTRECOVERABLE);
    }
}
