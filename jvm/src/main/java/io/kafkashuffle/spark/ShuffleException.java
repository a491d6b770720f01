package io.kafkashuffle.spark;

/**
 * A shuffle read failed; the message names the topic, partition, offset or option at fault.
 * The kind (format, option, layout, watermark, connection) mirrors the Python reader's errors.
 */
public class ShuffleException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public enum Kind {
    FORMAT("ShuffleFormatError"),
    OPTION("ShuffleOptionError"),
    LAYOUT("ShuffleLayoutError"),
    WATERMARK("ShuffleWatermarkError"),
    CONNECTION("ShuffleConnectionError"),
    NOT_FOUND("ShuffleTopicNotFoundError"),
    WINDOW_NOT_FOUND("ShuffleWindowNotFoundError"),
    DATA_LOSS("DataLossError"),
    SESSION("ShuffleSessionError");

    final String pythonName;

    Kind(String pythonName) {
      this.pythonName = pythonName;
    }
  }

  private final Kind kind;

  public ShuffleException(Kind kind, String message) {
    this(kind, message, null);
  }

  public ShuffleException(Kind kind, String message, Throwable cause) {
    // The Python error's name leads the message, so both paths' errors match alike.
    super(kind.pythonName + ": " + message, cause);
    this.kind = kind;
  }

  public Kind kind() {
    return kind;
  }

  /**
   * Sent from an executor to the driver as a plain {@code RuntimeException} with the same
   * message and stack trace: a session given the jar by {@code ADD JAR} loads its classes in a
   * loader that Spark's task-result thread does not use, and a class it cannot load anywhere
   * in a failed task's reason turns the whole reason into {@code UnknownReason}, message lost.
   */
  private Object writeReplace() {
    RuntimeException plain = new RuntimeException(getMessage());
    plain.setStackTrace(getStackTrace());
    return plain;
  }

  static ShuffleException format(String message) {
    return new ShuffleException(Kind.FORMAT, message);
  }

  static ShuffleException option(String message) {
    return new ShuffleException(Kind.OPTION, message);
  }
}
