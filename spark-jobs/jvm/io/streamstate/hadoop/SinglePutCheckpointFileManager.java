package io.streamstate.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.sql.streaming.checkpointFileManagerClass}: Spark's checkpoint file manager, with
 * one object PUT per checkpoint file where the file system's output streams can be aborted (S3A).
 *
 * <p>Spark writes every checkpoint file (offset log, commit log, state store changelogs and
 * snapshots) to a temporary name and renames it into place. On an object store a rename is a
 * copy and a delete, so each file costs three requests and its size twice in transfer. An S3A
 * object becomes visible only when its stream is closed, whole, so writing the final name
 * directly is as atomic as the rename; a cancelled write is aborted and leaves nothing. This is
 * what Spark's {@code AbortableStreamBasedCheckpointFileManager} (spark-hadoop-cloud) does;
 * that module is not published for the Spark release this project pins.
 *
 * <p>The PUT is the only request: S3A's existence probes of a create (a HEAD and a LIST, some
 * 6 ms on a local MinIO) are skipped ({@code fs.s3a.create.performance}). A checkpoint file's
 * name is never a directory's, and a file that must not be overwritten is written with a
 * conditional PUT ({@code If-None-Match}), which the store refuses atomically if the name
 * exists, where S3A's probe only looked a moment before; the refusal surfaces at close as the
 * {@link FileAlreadyExistsException} Spark's logs expect. Spark's callers look for the file
 * themselves just before writing one that must not be overwritten, so on a store that ignores
 * the condition (S3A's {@code fs.s3a.create.conditional.enabled}) the check is as it was.
 *
 * <p>Spark looks for each offset and commit log file before writing it, and S3A's existence
 * check of a missing name is a HEAD for a file and then a LIST for a directory of that name.
 * Those folders hold only files, so on S3A the check of a log file is the HEAD alone (an open,
 * which S3A answers from a HEAD and which reads nothing until read from): some 3.5 ms less
 * for each of a batch's two log files on a local MinIO. Every other path is checked as Spark
 * checks it.
 *
 * <p>Where the store refuses a second writer by itself (the conditional PUT in force), the log
 * file right after one this manager wrote is answered as missing without a request: a query
 * writes its logs in batch order through one manager per log, so only another writer could
 * have made that name since, and that writer's file refuses this one's PUT, which Spark reports
 * as two queries writing one checkpoint, as it does when it finds the file. Another 2.5 ms a
 * log file; a manager that has written nothing yet (a query's start) asks the store.
 *
 * <p>File systems whose streams cannot be aborted (local disk, HDFS) keep Spark's own
 * temporary-file-and-rename path, so the class is safe to set for every checkpoint.
 */
public class SinglePutCheckpointFileManager extends FileContextBasedCheckpointFileManager {
  private static final Logger LOG = LoggerFactory.getLogger(SinglePutCheckpointFileManager.class);

  /** S3A's create without its existence probes; an option other file systems ignore. */
  static final String CREATE_PERFORMANCE = "fs.s3a.create.performance";

  /** S3A's conditional create: a PUT that must not overwrite is refused if the name exists. */
  static final String CONDITIONAL_CREATE = "fs.s3a.create.conditional.enabled";

  /** A batch's file in an offset or commit log folder ({@code offsets/12}, {@code commits/12}). */
  private static final Pattern LOG_FILE_NAME = Pattern.compile("[0-9]+");

  private final boolean abortable;
  private final FileSystem fs;
  private final boolean refusesSecondWriter;
  /** The last log file this manager wrote without overwrite, by log folder. */
  private final Map<Path, Long> lastWrittenBatch = new ConcurrentHashMap<>();

  public SinglePutCheckpointFileManager(Path path, Configuration conf) throws IOException {
    super(path, conf);
    this.abortable = supportsAbort(path);
    this.fs = abortable ? path.getFileSystem(conf) : null;
    this.refusesSecondWriter = abortable && fs.getConf().getBoolean(CONDITIONAL_CREATE, true);
  }

  private boolean supportsAbort(Path path) {
    try {
      return fc().hasPathCapability(path, CommonPathCapabilities.ABORTABLE_STREAM);
    } catch (IOException e) {
      LOG.debug("cannot ask {} for abortable streams; writing through a rename", path, e);
      return false;
    }
  }

  /** Whether this manager writes each file with one PUT (false: Spark's rename path). */
  public boolean writesInPlace() {
    return abortable;
  }

  @Override
  public boolean exists(Path path) {
    if (!abortable || !isLogFile(path)) {
      return super.exists(path);
    }
    if (refusesSecondWriter && isNextAfterOwnWrite(path)) {
      return false;
    }
    try (FSDataInputStream ignored = fs.open(path)) {
      return true;
    } catch (FileNotFoundException e) {
      return false;
    } catch (IOException e) {
      throw rethrow(e);  // as Spark's exists does: only a missing name is "false"
    }
  }

  /** Whether {@code path} is the log file after the last one this manager wrote in its folder. */
  private boolean isNextAfterOwnWrite(Path path) {
    Long last = lastWrittenBatch.get(path.getParent());
    return last != null && batchOf(path) == last + 1;
  }

  /** The batch a log file is named after; -1 for a number past a batch id's range. */
  private static long batchOf(Path path) {
    try {
      return Long.parseLong(path.getName());
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private void written(Path path) {
    long batch = isLogFile(path) ? batchOf(path) : -1;
    if (batch >= 0) {
      lastWrittenBatch.merge(path.getParent(), batch, Math::max);
    }
  }

  /** Whether {@code path} is a batch's file in a streaming query's offset or commit log. */
  private static boolean isLogFile(Path path) {
    Path folder = path.getParent();
    return folder != null
        && (folder.getName().equals("offsets") || folder.getName().equals("commits"))
        && LOG_FILE_NAME.matcher(path.getName()).matches();
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    if (!abortable) {
      return super.createAtomic(path, overwriteIfPossible);
    }
    try {
      // S3A's builder is raw-typed; what it builds is an FSDataOutputStream.
      FSDataOutputStream out = (FSDataOutputStream)
          fs.createFile(path).overwrite(overwriteIfPossible).recursive().opt(CREATE_PERFORMANCE, "true").build();
      return new InPlaceStream(out, path, overwriteIfPossible);
    } catch (IOException e) {
      // Rethrown as is, as Spark's Scala managers do: HDFSMetadataLog tells a concurrent
      // writer by a FileAlreadyExistsException, which a wrapper would hide.
      throw rethrow(e);
    }
  }

  @SuppressWarnings("unchecked")
  private static <E extends Throwable> RuntimeException rethrow(Throwable e) throws E {
    throw (E) e;
  }

  /** Whether {@code e}, from the close of a write that must not overwrite, is the store's refusal. */
  static boolean refusedAsExisting(Throwable e) {
    for (Throwable cause = e; cause != null; cause = cause.getCause()) {
      // S3A's RemoteFileChangedException (hadoop-aws, not on this class's compile path): HTTP 412.
      if (cause.getClass().getSimpleName().equals("RemoteFileChangedException")) {
        return true;
      }
    }
    return false;
  }

  /** The final object's own stream: close publishes it, cancel aborts the upload. */
  private final class InPlaceStream extends CancellableFSDataOutputStream {
    private final FSDataOutputStream out;
    private final Path path;
    private final boolean overwrite;
    private boolean terminated;

    InPlaceStream(FSDataOutputStream out, Path path, boolean overwrite) {
      super(out);
      this.out = out;
      this.path = path;
      this.overwrite = overwrite;
    }

    @Override
    public synchronized void close() throws IOException {
      if (terminated) {
        return;
      }
      terminated = true;
      try {
        out.close();
      } catch (IOException e) {
        if (!overwrite && refusedAsExisting(e)) {
          FileAlreadyExistsException refused = new FileAlreadyExistsException(path + " already exists");
          refused.initCause(e);
          throw refused;
        }
        throw e;
      }
      if (!overwrite) {
        written(path);
      }
    }

    @Override
    public synchronized void cancel() {
      if (terminated) {
        return;
      }
      terminated = true;
      try {
        out.abort();
      } catch (RuntimeException e) {
        LOG.warn("could not abort the write of {}", path, e);
      }
      try {
        out.close();
      } catch (IOException | RuntimeException e) {
        LOG.warn("could not close the aborted write of {}", path, e);
      }
    }
  }
}
