import Foundation
import IAPProtocol
import JSONRPC
import NIOPosix
import ServiceSupport

/// Downloadable content: one file per catalog content id in `<data-dir>/content/` (`ContentFiles`, which
/// the edge reads too). Reads are ranged so a client can resume an interrupted download; each answer
/// carries the file's size and SHA-256 so the client can check what it assembled. File reads and hashing
/// (a whole file, the first time it is asked for) run on NIO's shared blocking-I/O thread pool, never on
/// the cooperative threads that answer every other request.
public final class ContentLibrary: Sendable {
    public let files: ContentFiles
    public var directory: URL { files.directory }

    public init(directory: URL) {
        self.files = ContentFiles(directory: directory)
    }

    /// Size, path and SHA-256 (hex) of a content file; nil when it is not installed.
    public func info(_ contentId: String) async throws(RPCError) -> ContentFiles.Installed? {
        try await Self.offload { () throws(RPCError) in try self.infoNow(contentId) }
    }

    /// Up to `length` bytes from `offset`; an offset equal to the size reads nothing (the end).
    public func read(_ contentId: String, offset: Int64, length: Int) async throws(RPCError) -> FulfillmentReadContent.Result {
        try await Self.offload { () throws(RPCError) in try self.readNow(contentId, offset: offset, length: length) }
    }

    /// Runs blocking file work on the shared I/O pool and hands back its answer or its RPCError.
    private static func offload<T: Sendable>(_ work: @escaping @Sendable () throws(RPCError) -> T) async throws(RPCError) -> T {
        let outcome: Result<T, RPCError>
        do {
            outcome = try await NIOThreadPool.singleton.runIfActive {
                Result<T, any Error> { try work() }.mapError { $0 as? RPCError ?? .internalError("reading content failed") }
            }
        } catch {
            throw RPCError.internalError("the content reader is not running")
        }
        return try outcome.get()
    }

    private func infoNow(_ contentId: String) throws(RPCError) -> ContentFiles.Installed? {
        do {
            return try files.installed(contentId)
        } catch {
            throw RPCError.internalError("reading content \(contentId) failed")
        }
    }

    private func readNow(_ contentId: String, offset: Int64, length: Int) throws(RPCError) -> FulfillmentReadContent.Result {
        guard let installed = try infoNow(contentId) else {
            throw RPCError.notFound("content \(contentId) is not installed on this server", reason: "contentMissing")
        }
        let size = installed.size
        guard offset <= size else {
            throw RPCError.invalidParams("offset \(offset) is past the end (size \(size))", field: "offset", reason: "outOfRange")
        }
        guard let handle = FileHandle(forReadingAtPath: installed.path) else {
            throw RPCError.notFound("content \(contentId) is not installed on this server", reason: "contentMissing")
        }
        defer { try? handle.close() }
        let bytes: Data
        do {
            try handle.seek(toOffset: UInt64(offset))
            bytes = try handle.read(upToCount: Int(min(Int64(length), size - offset))) ?? Data()
        } catch {
            throw RPCError.internalError("reading content \(contentId) failed")
        }
        return .init(data: bytes.base64EncodedString(), offset: offset, size: size, sha256: installed.sha256)
    }
}
