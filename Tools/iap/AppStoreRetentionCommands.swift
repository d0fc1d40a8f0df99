import AppStoreServerAPI
import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import Receipts
import ServiceSupport

/// `iap appstore retention ...`: Apple's Retention Messaging API called directly with the team's App Store Server API key
/// (the same key, key id, issuer id and bundle id verification uses): images, messages, default messages, the realtime URL
/// and the Sandbox performance test.
extension AppStoreCommand {
    struct Retention: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Apple's Retention Messaging API with the App Store Server API key: messages, images, defaults, the realtime URL, the performance test.",
            subcommands: [
                Messages.self, UploadMessage.self, DeleteMessage.self, Images.self, UploadImage.self, DeleteImage.self, Default.self, URLCommand.self,
                PerformanceTest.self,
            ])
    }

    /// The key and where Apple is: flags, else the environment verification reads (IAP_APP_STORE_API_KEY, ...).
    struct APIOptions: ParsableArguments {
        @Option(name: .customLong("key"), help: "The .p8 key file (env IAP_APP_STORE_API_KEY).") var key: String?
        @Option(name: .customLong("key-id"), help: "Its key id (env IAP_APP_STORE_API_KEY_ID; else the .json beside the key).") var keyId: String?
        @Option(name: .customLong("issuer-id"), help: "The team's issuer id (env IAP_APP_STORE_API_ISSUER_ID).") var issuerId: String?
        @Option(name: .customLong("bundle-id"), help: "The app (env IAP_BUNDLE_IDS: the first).") var bundleId: String?
        @Option(name: .customLong("api-url"), help: "Production base URL (env IAP_APP_STORE_API_URL; default Apple's).") var apiURL: String?
        @Option(name: .customLong("sandbox-api-url"), help: "Sandbox base URL (env IAP_APP_STORE_API_SANDBOX_URL).") var sandboxURL: String?
        @Flag(help: "Apple's sandbox environment instead of production.") var sandbox = false
        @Flag(help: "Print the answer as JSON.") var json = false

        var environment: AppleEnvironment { sandbox ? .sandbox : .production }

        func client() throws -> AppStoreServerAPIClient {
            func given(_ flag: String?, _ env: String) -> String? { Environment.resolve(flag, env: env).flatMap { $0.isEmpty ? nil : $0 } }
            guard let keyFile = given(key, "IAP_APP_STORE_API_KEY") else { throw ValidationError("no key: pass --key or set IAP_APP_STORE_API_KEY") }
            let beside = KeyIdentity.beside(keyFile)
            guard let keyId = given(keyId, "IAP_APP_STORE_API_KEY_ID") ?? beside?.keyId,
                let issuerId = given(issuerId, "IAP_APP_STORE_API_ISSUER_ID") ?? beside?.issuerId
            else { throw ValidationError("the key needs --key-id and --issuer-id") }
            guard let bundle = given(bundleId, "IAP_BUNDLE_IDS")?.split(separator: ",").first.map(String.init) else {
                throw ValidationError("no app: pass --bundle-id or set IAP_BUNDLE_IDS")
            }
            guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else { throw ValidationError("\(keyFile) cannot be read") }
            var config = AppStoreServerAPIClient.Configuration()
            if let url = given(apiURL, "IAP_APP_STORE_API_URL") { config.productionURL = url }
            if let url = given(sandboxURL, "IAP_APP_STORE_API_SANDBOX_URL") { config.sandboxURL = url }
            config.maxAttempts = 1
            return AppStoreServerAPIClient(
                credentials: try AppStoreAPICredentials(keyId: keyId, issuerId: issuerId, bundleId: bundle, privateKeyPEM: pem),
                verifier: SignedPayloadVerifier(roots: ShippedTrust.appleRoots), configuration: config)
        }

        /// Runs `call`, printing `human(answer)` (or the JSON of `json(answer)`); Apple's refusals exit 1 with Apple's code.
        func run<T>(_ call: (AppStoreServerAPIClient) async throws -> T, human: (T) -> String, json toJSON: (T) -> JSONValue) async throws {
            let answer: T
            do {
                answer = try await call(try client())
            } catch let error as AppStoreAPIError {
                switch error {
                case .api(let status, let code, let message):
                    fail(
                        "Apple refused: HTTP \(status)" + (code.map { " error \($0)" } ?? "") + (message.map { ": \($0)" } ?? ""),
                        exit: ExitCodes.refused)
                case .transport(let detail): fail("Apple could not be reached: \(detail)", exit: ExitCodes.unreachable)
                default: fail("Apple's answer was refused: \(error)", exit: ExitCodes.refused)
                }
            }
            if json {
                print(String(decoding: try JSONByteEncoder.encode(toJSON(answer)), as: UTF8.self))
            } else {
                print(human(answer))
            }
        }

        func done(_ call: (AppStoreServerAPIClient) async throws -> Void, _ text: String) async throws {
            try await run(call, human: { _ in text }, json: { _ in .object([:]) })
        }
    }

    static func assets(_ list: [RetentionAsset]) -> JSONValue {
        .array(
            list.map { a in
                .object(["identifier": .string(a.identifier), "state": .string(a.state), "imageSize": a.imageSize.map(JSONValue.string) ?? .null])
            })
    }

    struct Messages: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The uploaded messages and Apple's review state of each (Get Message List).")
        @OptionGroup var api: APIOptions
        func run() async throws {
            try await api.run(
                { try await $0.messageList(api.environment) },
                human: { $0.isEmpty ? "no messages" : $0.map { "\($0.identifier)  \($0.state)" }.joined(separator: "\n") },
                json: AppStoreCommand.assets)
        }
    }

    struct UploadMessage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "upload-message", abstract: "Upload a message (Upload Message); Apple reviews it.")
        @Argument(help: "A new UUID naming the message.") var messageId: String
        @Option(help: "At most 66 characters.") var header: String
        @Option(help: "At most 144 characters.") var body: String
        @Option(help: "An uploaded full-size image to show with it.") var image: String?
        @Option(name: .customLong("alt"), help: "The image's alternative text (at most 150).") var altText: String?
        @OptionGroup var api: APIOptions
        func validate() throws {
            guard (image == nil) == (altText == nil) else { throw ValidationError("--image and --alt go together") }
        }
        func run() async throws {
            let message = RetentionMessageUpload(
                header: header, body: body, image: image.map { .init(imageIdentifier: $0, altText: altText ?? "") })
            try await api.done(
                { try await $0.uploadMessage(api.environment, messageIdentifier: messageId, message: message) },
                "\(messageId): uploaded, PENDING review")
        }
    }

    struct DeleteMessage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete-message", abstract: "Delete a message (Delete Message).")
        @Argument var messageId: String
        @OptionGroup var api: APIOptions
        func run() async throws {
            try await api.done({ try await $0.deleteMessage(api.environment, messageIdentifier: messageId) }, "\(messageId): deleted")
        }
    }

    struct Images: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The uploaded images, their size and review state (Get Image List).")
        @OptionGroup var api: APIOptions
        func run() async throws {
            try await api.run(
                { try await $0.imageList(api.environment) },
                human: { $0.isEmpty ? "no images" : $0.map { "\($0.identifier)  \($0.state)  \($0.imageSize ?? "")" }.joined(separator: "\n") },
                json: AppStoreCommand.assets)
        }
    }

    struct UploadImage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "upload-image", abstract: "Upload a PNG without transparency (Upload Image); full size is 3840 wide, 160-2160 high.")
        @Argument(help: "A new UUID naming the image.") var imageId: String
        @Argument(help: "The PNG file.") var file: String
        @Option(help: "FULL_SIZE (default) or BULLET_POINT.") var size = "FULL_SIZE"
        @OptionGroup var api: APIOptions
        func run() async throws {
            guard let png = FileManager.default.contents(atPath: file) else { throw ValidationError("\(file) cannot be read") }
            try await api.done(
                { try await $0.uploadImage(api.environment, imageIdentifier: imageId, png: Array(png), imageSize: size) },
                "\(imageId): uploaded, PENDING review")
        }
    }

    struct DeleteImage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete-image", abstract: "Delete an image no message uses (Delete Image).")
        @Argument var imageId: String
        @OptionGroup var api: APIOptions
        func run() async throws {
            try await api.done({ try await $0.deleteImage(api.environment, imageIdentifier: imageId) }, "\(imageId): deleted")
        }
    }

    struct Default: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A product and locale's default message: show it, set it to an approved message, or --delete it.")
        @Argument(help: "Product id.") var productId: String
        @Argument(help: "Locale, e.g. en-US.") var locale: String
        @Argument(help: "An approved message to make the default.") var messageId: String?
        @Flag(help: "Remove the default.") var delete = false
        @OptionGroup var api: APIOptions
        func run() async throws {
            let env = api.environment
            if delete {
                try await api.done(
                    { try await $0.deleteDefaultMessage(env, productId: productId, locale: locale) }, "\(productId) \(locale): no default")
            } else if let messageId {
                try await api.done(
                    { try await $0.configureDefaultMessage(env, productId: productId, locale: locale, messageIdentifier: messageId) },
                    "\(productId) \(locale): default message \(messageId)")
            } else {
                try await api.run(
                    { try await $0.defaultMessage(env, productId: productId, locale: locale) }, human: { "\(productId) \(locale): \($0)" },
                    json: { .object(["messageIdentifier": .string($0)]) })
            }
        }
    }

    struct URLCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "url", abstract: "The realtime URL Apple calls (the edge's /v1/retention/appstore): show, set, or --delete.")
        @Argument(help: "https://.../v1/retention/appstore") var url: String?
        @Flag(help: "Remove it.") var delete = false
        @OptionGroup var api: APIOptions
        func run() async throws {
            let env = api.environment
            if delete {
                try await api.done({ try await $0.deleteRealtimeURL(env) }, "\(env.rawValue): no realtime URL")
            } else if let url {
                try await api.done({ try await $0.configureRealtimeURL(env, url: url) }, "\(env.rawValue) realtime URL: \(url)")
            } else {
                try await api.run({ try await $0.realtimeURL(env) }, human: { $0 }, json: { .object(["realtimeURL": .string($0)]) })
            }
        }
    }

    struct PerformanceTest: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "performance-test",
            abstract: "Apple's Sandbox performance test of the realtime URL: start it for a Sandbox subscription, or read a test's result (--result)."
        )
        @Argument(help: "A Sandbox subscription's original transaction id, or with --result the test's request id.") var id: String
        @Flag(help: "Read the result of the test `id`.") var result = false
        @OptionGroup var api: APIOptions
        func run() async throws {
            if result {
                try await api.run(
                    { try await $0.performanceTestResult(requestId: id) },
                    human: { r in
                        "\(r["result"]?.stringValue ?? "?"): success \(r["successRate"]?.intValue.map { "\($0)%" } ?? "-"), p99 "
                            + "\(r["responseTimes"]?["p99"]?.intValue.map { "\($0) ms" } ?? "-"), pending \(r["numPending"]?.intValue ?? 0)"
                    }, json: { $0 })
            } else {
                try await api.run(
                    { try await $0.initiatePerformanceTest(originalTransactionId: id) },
                    human: { "test \($0.requestId) started; iap appstore retention performance-test --sandbox --result \($0.requestId)" },
                    json: { .object(["requestId": .string($0.requestId), "config": $0.config]) })
            }
        }
    }
}
