package dynagent.nacos;

import io.grpc.InsecureServerCredentials;
import io.grpc.ServerBuilder;
import io.grpc.ServerCredentials;
import io.grpc.ServerProvider;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;

import java.net.InetSocketAddress;

/**
 * gRPC server provider that makes {@code ServerBuilder.forPort(port)} bind to the address in the
 * system property {@code nacos.remote.grpc.listen.ip} instead of the wildcard address.
 *
 * <p>Nacos' own SDK/cluster gRPC servers already honour that property, but the JRaft RPC server
 * (port = HTTP port - 1000, e.g. 7848) is built with {@code ServerBuilder.forPort} and would
 * otherwise listen on every interface. Registered through META-INF/services with a higher
 * priority than grpc-netty-shaded's provider (5); inactive when the property is unset.
 */
public final class LoopbackServerProvider extends ServerProvider {

    private static String bindHost() {
        String ip = System.getProperty("nacos.remote.grpc.listen.ip");
        return ip == null || ip.isBlank() ? null : ip.trim();
    }

    @Override
    protected boolean isAvailable() {
        return bindHost() != null;
    }

    @Override
    protected int priority() {
        return 8;
    }

    @Override
    protected ServerBuilder<?> builderForPort(int port) {
        return NettyServerBuilder.forAddress(new InetSocketAddress(bindHost(), port));
    }

    @Override
    protected NewServerBuilderResult newServerBuilderForPort(int port, ServerCredentials creds) {
        if (!(creds instanceof InsecureServerCredentials)) {
            return NewServerBuilderResult.error("LoopbackServerProvider only handles insecure credentials");
        }
        return NewServerBuilderResult.serverBuilder(builderForPort(port));
    }
}
