package io.streamstate.hadoop;

import java.io.IOException;
import java.util.EnumSet;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.Options;
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
 * <p>File systems whose streams cannot be aborted (local disk, HDFS) keep Spark's own
 * temporary-file-and-rename path, so the class is safe to set for every checkpoint.
 */
public class SinglePutCheckpointFileManager extends FileContextBasedCheckpointFileManager {
  private static final Logger LOG = LoggerFactory.getLogger(SinglePutCheckpointFileManager.class);

  private final boolean abortable;

  public SinglePutCheckpointFileManager(Path path, Configuration conf) {
    super(path, conf);
    this.abortable = supportsAbort(path);
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
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    if (!abortable) {
      return super.createAtomic(path, overwriteIfPossible);
    }
    EnumSet<CreateFlag> flags =
        overwriteIfPossible ? EnumSet.of(CreateFlag.CREATE, CreateFlag.OVERWRITE) : EnumSet.of(CreateFlag.CREATE);
    try {
      return new InPlaceStream(fc().create(path, flags, Options.CreateOpts.createParent()), path);
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

  /** The final object's own stream: close publishes it, cancel aborts the upload. */
  private static final class InPlaceStream extends CancellableFSDataOutputStream {
    private final FSDataOutputStream out;
    private final Path path;
    private boolean terminated;

    InPlaceStream(FSDataOutputStream out, Path path) {
      super(out);
      this.out = out;
      this.path = path;
    }

    @Override
    public synchronized void close() throws IOException {
      if (terminated) {
        return;
      }
      terminated = true;
      out.close();
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
