package io.streamstate.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a process per file.
 *
 * <p>Without Hadoop's native library (which no Maven artifact ships), RawLocalFileSystem forks
 * {@code chmod} for every file and directory it creates with a permission, and {@code readlink}
 * for every link status, which FileContext's rename asks for. A streaming query writes its offset
 * log, commit log and state store files that way, several per batch: on 2 cores each spawn cost a
 * batch tens of milliseconds. Here both are Java calls with the same effect; a sticky bit (which
 * java.nio cannot set) and real symbolic links still take Hadoop's own path.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
  // FsPermission's bits, lowest first: others x w r, group x w r, owner x w r.
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> posix = EnumSet.noneOf(PosixFilePermission.class);
    short mode = permission.toShort();
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        posix.add(BITS[bit]);
      }
    }
    return posix;
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    // Hadoop's answer for anything that is not a symbolic link is the file's own status.
    if (!Files.isSymbolicLink(pathToFile(f).toPath())) {
      return getFileStatus(f);
    }
    return super.getFileLinkStatus(f);
  }
}
